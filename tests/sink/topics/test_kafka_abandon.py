"""``unaligned abandon``'s choices on a decided batch, against the coordinator's answers
(stand-ins here; integration/test_prefix_clashes.py runs them on a broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kafka.admin import TransactionDescription, TransactionState

from unaligned.checkpoint import Checkpoint
from unaligned.errors import AbandonError
from unaligned.kafka.transactions import transaction_coordinator, transaction_states
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.topics.kafka_abandon import Choice, ItemState, abandon

ITEMS = (
    {"transactionalId": "p-q1-0-0", "producerId": 10, "epoch": 2, "recordCount": 5},
    {"transactionalId": "p-q1-1-0", "producerId": 11, "epoch": 4, "recordCount": 5},
    {"transactionalId": "p-q1-2-0", "producerId": 12, "epoch": 0, "recordCount": 0},
)


def _now(state: str, pid: int, epoch: int) -> TransactionDescription:
    return TransactionDescription(1, TransactionState(state), pid, epoch, 10_000, 0, set())


@pytest.fixture
def log(tmp_path: Path) -> CommitLog:
    (tmp_path / "metadata").write_text('{"id":"q"}\n')
    commit_log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    commit_log.write(CommitRecord(3, "kafka", ITEMS, 0))
    return commit_log


@pytest.fixture
def coordinator(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The coordinator's descriptions (set by each test) and the ends sent to it."""
    state: dict[str, Any] = {"now": {}, "committed": [], "aborted": []}
    monkeypatch.setattr(
        transaction_states,
        "describe_transactions",
        lambda kw, ids: {i: state["now"][i] for i in ids},
    )
    monkeypatch.setattr(
        transaction_coordinator,
        "commit_all_prepared",
        lambda kw, ps: state["committed"].extend(p.transactional_id for p in ps),
    )
    monkeypatch.setattr(
        transaction_coordinator,
        "abort_prepared",
        lambda kw, p: state["aborted"].append(p.transactional_id),
    )
    return state


def test_commit_ends_the_held_ones_and_marks_the_batch_done(
    log: CommitLog, coordinator: dict[str, Any]
) -> None:
    coordinator["now"] = {
        "p-q1-0-0": _now("Ongoing", 10, 2),
        "p-q1-1-0": _now("CompleteCommit", 11, 4),
    }
    items = abandon(log, 3, Choice.COMMIT, {})
    assert [i.state for i in items] == [ItemState.HELD, ItemState.COMMITTED, ItemState.EMPTY]
    assert coordinator["committed"] == ["p-q1-0-0"] and log.is_done(3)
    assert log.abandoned_notes()[3]["choice"] == "commit"


def test_commit_is_refused_when_the_broker_aborted_one(
    log: CommitLog, coordinator: dict[str, Any]
) -> None:
    coordinator["now"] = {
        "p-q1-0-0": _now("Ongoing", 10, 2),
        "p-q1-1-0": _now("CompleteAbort", 11, 5),
    }
    with pytest.raises(AbandonError, match="cannot be committed exactly once.*--replay"):
        abandon(log, 3, Choice.COMMIT, {})
    assert coordinator["committed"] == [] and not log.is_done(3)
    assert log.read(3) is not None and log.abandoned_notes() == {}


def test_replay_aborts_and_withdraws_the_record_so_spark_runs_the_batch_again(
    log: CommitLog, coordinator: dict[str, Any]
) -> None:
    coordinator["now"] = {
        "p-q1-0-0": _now("Ongoing", 10, 2),
        "p-q1-1-0": _now("CompleteAbort", 11, 5),
    }
    abandon(log, 3, Choice.REPLAY, {})
    assert coordinator["aborted"] == ["p-q1-0-0"]
    assert log.read(3) is None and not log.is_done(3)
    assert log.abandoned_notes()[3]["items"][1]["stateFound"] == "aborted"


def test_replay_refuses_a_partly_committed_batch_unless_duplicates_are_accepted(
    log: CommitLog, coordinator: dict[str, Any]
) -> None:
    coordinator["now"] = {
        "p-q1-0-0": _now("Ongoing", 10, 2),
        "p-q1-1-0": _now("CompleteCommit", 11, 4),
    }
    with pytest.raises(AbandonError, match="cannot be replayed exactly once.*--skip"):
        abandon(log, 3, Choice.REPLAY, {})
    assert log.read(3) is not None and coordinator["aborted"] == []
    abandon(log, 3, Choice.REPLAY, {}, accept_duplicates=True)
    assert log.read(3) is None


def test_skip_aborts_and_marks_the_batch_done_as_abandoned(
    log: CommitLog, coordinator: dict[str, Any]
) -> None:
    coordinator["now"] = {"p-q1-0-0": _now("Ongoing", 10, 2), "p-q1-1-0": _now("Ongoing", 11, 4)}
    abandon(log, 3, Choice.SKIP, {})
    assert coordinator["aborted"] == ["p-q1-0-0", "p-q1-1-0"]
    assert log.is_done(3) and (log.done_info(3) or {})["abandoned"] == "skip"
    with pytest.raises(AbandonError, match="finished"):
        abandon(log, 3, Choice.SKIP, {})


def test_a_batch_without_a_record_or_of_the_file_sink_has_nothing_held(
    log: CommitLog, coordinator: dict[str, Any]
) -> None:
    with pytest.raises(AbandonError, match="never decided"):
        abandon(log, 9, Choice.SKIP, {})
    log.write(CommitRecord(4, "files", ({"staged": "s"},), 0))
    with pytest.raises(AbandonError, match="'files' sink"):
        abandon(log, 4, Choice.SKIP, {})
