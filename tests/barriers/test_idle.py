"""Idle-barrier hints: the sink publishes pending channel state under the query's barrier token,
the source asks for one empty batch per hinted barrier. Files only, under a tmp hint dir."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import pytest

from unaligned.barriers import idle as idle_barriers
from unaligned.barriers.idle import HINT_DIR_ENV, IdleBarrierTrigger, PendingHint


@pytest.fixture
def hint_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "hints"
    monkeypatch.setenv(HINT_DIR_ENV, str(directory))
    return directory


# --- where hints live ---------------------------------------------------------------------------


def test_hint_dir_follows_the_environment(hint_dir: Path) -> None:
    assert idle_barriers.hint_dir() == hint_dir


def test_hint_dir_defaults_under_the_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HINT_DIR_ENV, raising=False)
    assert idle_barriers.hint_dir() == Path(tempfile.gettempdir()) / "unaligned-idle-barriers"


def test_new_tokens_are_distinct_and_usable_as_file_names(hint_dir: Path) -> None:
    tokens = {idle_barriers.new_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in list(tokens)[:3]:
        idle_barriers.publish(token, PendingHint(1, 1))  # raises if the token were refused
    assert sorted(p.name for p in hint_dir.iterdir()) == sorted(
        f"{t}.json" for t in list(tokens)[:3]
    )


@pytest.mark.parametrize("token", ["", "../escape", "a/b", "a-b", "a.b", "tok en"])
def test_tokens_that_could_leave_the_hint_dir_are_refused(hint_dir: Path, token: str) -> None:
    with pytest.raises(ValueError, match="barrier token"):
        idle_barriers.publish(token, PendingHint(1, 1))
    with pytest.raises(ValueError, match="barrier token"):
        idle_barriers.publish(token, None)
    assert not any(hint_dir.parent.rglob("*.json"))  # nothing written, inside or outside


def test_reading_a_malformed_token_is_no_hint(hint_dir: Path, tmp_path: Path) -> None:
    # The source reads the token from its checkpointed offset; a mangled token only costs the
    # idle barrier (a hint is only a hint), and never reads a file outside the hint dir.
    (tmp_path / "escape.json").write_text('{"batchId": 1, "pendingRows": 5}')
    assert idle_barriers.read("../escape") is None
    assert not IdleBarrierTrigger().due("../escape")


# --- publish / read / clear -----------------------------------------------------------------------


def test_publish_then_read_round_trips(hint_dir: Path) -> None:
    idle_barriers.publish("tok1", PendingHint(batch_id=7, pending_rows=120))
    assert idle_barriers.read("tok1") == PendingHint(7, 120)
    # The on-disk form is what the module docstring promises (another process reads it).
    assert json.loads((hint_dir / "tok1.json").read_text()) == {"batchId": 7, "pendingRows": 120}


def test_publish_replaces_the_previous_hint_and_leaves_no_temporary_files(hint_dir: Path) -> None:
    idle_barriers.publish("tok1", PendingHint(7, 120))
    idle_barriers.publish("tok1", PendingHint(8, 5))
    assert idle_barriers.read("tok1") == PendingHint(8, 5)
    assert [p.name for p in hint_dir.iterdir()] == ["tok1.json"]


def test_hints_of_different_tokens_are_independent(hint_dir: Path) -> None:
    idle_barriers.publish("queryA", PendingHint(3, 10))
    idle_barriers.publish("queryB", PendingHint(9, 1))
    idle_barriers.publish("queryA", None)
    assert idle_barriers.read("queryA") is None
    assert idle_barriers.read("queryB") == PendingHint(9, 1)


def test_clear_removes_the_hint_and_is_idempotent(hint_dir: Path) -> None:
    idle_barriers.publish("tok1", PendingHint(7, 120))
    idle_barriers.publish("tok1", None)
    assert idle_barriers.read("tok1") is None
    assert not (hint_dir / "tok1.json").exists()
    idle_barriers.publish("tok1", None)  # nothing there, hint dir may not even exist: fine
    idle_barriers.publish("never", None)


def test_no_hint_reads_as_none(hint_dir: Path) -> None:
    assert idle_barriers.read("tok1") is None  # the hint dir does not exist yet


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"batchId": 3}',
        b'{"batchId": "three", "pendingRows": 1}',
        b'{"batchId": null, "pendingRows": 1}',
        b"[1, 2]",
        b"",
        b"\xff\xfe not utf-8",
    ],
)
def test_unreadable_hint_is_treated_as_none_with_a_warning(
    hint_dir: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    hint_dir.mkdir(parents=True)
    (hint_dir / "tok1.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="unaligned.barriers.idle"):
        assert idle_barriers.read("tok1") is None
    assert any("tok1" in r.getMessage() for r in caplog.records)


def test_hint_path_taken_by_a_directory_reads_as_none(hint_dir: Path) -> None:
    (hint_dir / "tok1.json").mkdir(parents=True)
    assert idle_barriers.read("tok1") is None


# --- tokens in Spark's offset log -----------------------------------------------------------------


def test_tokens_in_picks_string_tokens_of_parsed_source_offsets() -> None:
    offsets = [
        {"offsets": {"t": {"0": 5}}, "idleBarrier": 0, "barrierToken": "abc123"},
        None,  # a source Spark wrote "-" for
        {"offsets": {}},  # an older offset without a token
        {"barrierToken": 42},  # not a string: not a token
        "just a string",  # another source's offset format
        [1, 2],
        {"barrierToken": "def456"},
    ]
    assert idle_barriers.tokens_in(offsets) == ["abc123", "def456"]
    assert idle_barriers.tokens_in([]) == []


# --- the source's trigger -------------------------------------------------------------------------


def test_trigger_fires_once_per_hinted_batch(hint_dir: Path) -> None:
    trigger = IdleBarrierTrigger()
    assert not trigger.due("tok1")  # no hint at all

    idle_barriers.publish("tok1", PendingHint(4, 30))
    assert trigger.due("tok1")
    assert not trigger.due("tok1")  # already asked for barrier 5 for this state
    assert not trigger.due("tok1")

    idle_barriers.publish("tok1", PendingHint(5, 10))  # barrier 5 left some again
    assert trigger.due("tok1")
    assert not trigger.due("tok1")


def test_trigger_ignores_a_hint_older_than_the_one_it_answered(hint_dir: Path) -> None:
    trigger = IdleBarrierTrigger()
    idle_barriers.publish("tok1", PendingHint(9, 30))
    assert trigger.due("tok1")
    idle_barriers.publish("tok1", PendingHint(8, 30))  # a stale writer (older batch)
    assert not trigger.due("tok1")


def test_trigger_does_not_fire_without_pending_rows(hint_dir: Path) -> None:
    trigger = IdleBarrierTrigger()
    idle_barriers.publish("tok1", PendingHint(4, 0))
    assert not trigger.due("tok1")
    idle_barriers.publish("tok1", None)
    assert not trigger.due("tok1")
    # A zero-row hint did not consume barrier 4: real pending state of batch 4 still triggers.
    idle_barriers.publish("tok1", PendingHint(4, 3))
    assert trigger.due("tok1")


def test_trigger_does_not_fire_on_an_unreadable_hint(hint_dir: Path) -> None:
    hint_dir.mkdir(parents=True)
    (hint_dir / "tok1.json").write_text("garbage")
    trigger = IdleBarrierTrigger()
    assert not trigger.due("tok1")
    idle_barriers.publish("tok1", PendingHint(2, 1))  # readable again
    assert trigger.due("tok1")


def test_trigger_reads_only_its_own_token(hint_dir: Path) -> None:
    trigger = IdleBarrierTrigger()
    idle_barriers.publish("otherQuery", PendingHint(4, 30))
    assert not trigger.due("tok1")


def test_a_restarted_source_reacts_once_to_a_hint_still_on_disk(hint_dir: Path) -> None:
    # The source's reader object is new after a restart; a hint left by the previous run costs at
    # most one idle barrier (the module's liveness-only promise), not one per trigger.
    idle_barriers.publish("tok1", PendingHint(4, 30))
    first_run = IdleBarrierTrigger()
    assert first_run.due("tok1")
    restarted = IdleBarrierTrigger()
    assert restarted.due("tok1")
    assert not restarted.due("tok1")


# --- the first barrier of a run ---------------------------------------------------------------


def test_start_of_run_forces_one_barrier_only_when_resuming_an_earlier_run(hint_dir: Path) -> None:
    resumed = IdleBarrierTrigger()
    assert resumed.start_of_run(resumed=True)  # no hint on this (new) host, still one barrier
    assert not resumed.start_of_run(resumed=True)
    assert not resumed.due("tok1")  # and none without a hint afterwards

    fresh = IdleBarrierTrigger()
    assert not fresh.start_of_run(resumed=False)  # a new query has nothing pending
    assert not fresh.start_of_run(resumed=True)  # only the first call of the object's life


def test_a_batch_planned_first_makes_the_run_barrier_unnecessary(hint_dir: Path) -> None:
    # Spark re-ran the earlier run's last batch: its commit publishes the hint on this host.
    rerun = IdleBarrierTrigger()
    rerun.batch_planned()
    assert not rerun.start_of_run(resumed=True)
    idle_barriers.publish("tok1", PendingHint(7, 3))
    assert rerun.due("tok1")
