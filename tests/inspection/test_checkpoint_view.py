"""``build_view``: every fact ``unaligned inspect`` shows, read from a synthetic checkpoint
(``conftest.py`` describes it), and the paths it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoint_files import QUERY_ID, TOKEN, decide, new_checkpoint, plan, source_offset
from unaligned.checkpoint import Checkpoint
from unaligned.errors import NotACheckpointError
from unaligned.finishing.final_checkpoint import mark_finished
from unaligned.finishing.stop_request import mark_completed, mark_honoured, request_stop
from unaligned.inspection import broker_transactions, build_view
from unaligned.inspection.model import (
    InDoubtBatch,
    OpenTransaction,
    PendingChannelState,
    PendingTaskState,
)
from unaligned.sink.topics.kafka_id_pool import id_stem


def test_barriers_carry_their_metrics_start_and_both_commit_logs(checkpoint: Path) -> None:
    view = build_view(Checkpoint.resolve(str(checkpoint)))
    assert view.query_id == QUERY_ID
    by_id = {b.batch_id: b for b in view.barriers}
    assert sorted(by_id) == [0, 1, 2, 3, 4]
    assert [(b.sink, b.spark, b.committed) for b in view.barriers] == [
        ("pruned", "pruned", True),
        ("done", "committed", True),
        ("done", "committed", True),
        ("in-doubt", "planned", False),
        ("undecided", "planned", False),
    ]
    one = by_id[1]
    assert (one.start_ms, one.duration_ms, one.start_delay_ms, one.mode) == (
        1_700_000_001_000,
        31_000,
        120,
        "unaligned",
    )
    assert (one.tasks, one.tasks_cut, one.rows_written, one.rows_spilled, one.rows_replayed) == (
        2,
        1,
        70,
        30,
        0,
    )
    assert (one.channel_state_files, one.channel_state_bytes, one.inlined_bytes) == (1, 4096, 0)
    two = by_id[2]
    assert (two.rows_replayed, two.rows_spilled, two.inlined_bytes, two.mode) == (
        30,
        3,
        100,
        "aligned",
    )
    assert by_id[0].start_ms is None and by_id[0].duration_ms == 1200
    assert not by_id[4].has_metrics and by_id[4].start_ms == 1_700_000_004_000


def test_in_doubt_batches_are_the_decided_ones_without_a_done_marker(checkpoint: Path) -> None:
    view = build_view(Checkpoint.resolve(str(checkpoint)))
    assert view.in_doubt == (
        InDoubtBatch(3, "kafka", 1_700_000_003_900, 2, ("unaligned-q-0-1", "unaligned-q-1-1")),
    )
    assert view.open_transactions is None


def test_pending_channel_state_comes_from_the_newest_commit_record(checkpoint: Path) -> None:
    assert build_view(Checkpoint.resolve(str(checkpoint))).pending == PendingChannelState(
        3,
        (
            PendingTaskState(task_index=0, rows=25, files=1, inline=0, bytes=4096, barriers=(1,)),
            PendingTaskState(task_index=1, rows=5, files=0, inline=2, bytes=160, barriers=(2, 3)),
        ),
    )


def test_sources_come_from_the_last_offset_log_entry(checkpoint: Path) -> None:
    (source,) = build_view(Checkpoint.resolve(str(checkpoint))).sources
    assert (source.source_id, source.batch_id, source.barrier_token) == ("0", 4, TOKEN)
    assert source.positions == {"in": {0: 40, 1: 12}}
    assert source.ending == {"in": {0: 40, 1: 15}}
    assert source.finished == {"in": (0,)}
    assert not source.end_of_data and not source.drained


def test_end_of_data_and_a_drain_show_on_the_source(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "ck")
    plan(root, 0, [source_offset({0: 9}, ending={0: 9}, drained=True)])
    (source,) = build_view(Checkpoint.resolve(str(root))).sources
    assert source.end_of_data and source.drained and source.finished == {"in": (0,)}


def test_an_unbounded_source_has_no_end(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "ck")
    plan(root, 0, [source_offset({0: 9, 1: 3})])
    (source,) = build_view(Checkpoint.resolve(str(root))).sources
    assert source.ending is None and source.finished == {} and not source.end_of_data


def test_a_query_without_finished_json_or_stop_request(checkpoint: Path) -> None:
    view = build_view(Checkpoint.resolve(str(checkpoint)))
    assert view.finished is None and view.stop_request is None


def test_finished_is_shown_and_true_only_for_the_last_committed_batch(checkpoint: Path) -> None:
    mark_finished(Checkpoint.resolve(str(checkpoint)), 2)
    stale = build_view(Checkpoint.resolve(str(checkpoint))).finished
    assert stale is not None
    assert (stale.final_batch_id, stale.has_finished) == (2, False)
    assert stale.finished_at_ms is not None

    for batch in (3, 4):
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}")
    mark_finished(Checkpoint.resolve(str(checkpoint)), 4)
    final = build_view(Checkpoint.resolve(str(checkpoint))).finished
    assert final is not None and (final.final_batch_id, final.has_finished) == (4, True)


def test_a_stop_request_shows_how_far_it_got(checkpoint: Path) -> None:
    request = request_stop(Checkpoint.resolve(str(checkpoint)), drain=True)
    view = build_view(Checkpoint.resolve(str(checkpoint))).stop_request
    assert view is not None and view.drain and view.honoured_by is None
    assert view.requested_at_ms == request.requested_at_ms
    mark_honoured(Checkpoint.resolve(str(checkpoint)), request, "reader-1")
    mark_completed(Checkpoint.resolve(str(checkpoint)), 4)
    view = build_view(Checkpoint.resolve(str(checkpoint))).stop_request
    assert view is not None
    assert (view.honoured_by, view.completed_batch_id) == ("reader-1", 4)
    assert view.honoured_at_ms is not None


def test_a_checkpoint_with_no_batch_yet_is_empty(tmp_path: Path) -> None:
    view = build_view(Checkpoint.resolve(str(new_checkpoint(tmp_path / "ck"))))
    assert (view.barriers, view.in_doubt, view.sources, view.pending) == ((), (), (), None)


# --- the open transactions ------------------------------------------------------------------


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Replace the broker: record (servers, prefix) and answer one open transaction."""
    calls: list[tuple[str, str]] = []

    def answer(client: Any, prefix: str, stem: str, in_doubt: Any) -> tuple[OpenTransaction, ...]:
        calls.append((client["bootstrap_servers"], prefix))
        return (OpenTransaction(f"{stem}-0-1", "Ongoing", 7, 0, 1, 60_000, 3),)

    monkeypatch.setattr(broker_transactions, "open_transactions", answer)
    monkeypatch.setattr(broker_transactions, "with_outcomes", lambda client, log, b: b)
    return calls


def test_open_transactions_use_the_prefix_of_the_commit_records(
    checkpoint: Path, asked: list[tuple[str, str]]
) -> None:
    found = build_view(
        Checkpoint.resolve(str(checkpoint)), kafka_client={"bootstrap_servers": "h:9092"}
    ).open_transactions
    assert asked == [("h:9092", "unaligned-q")]
    assert found is not None and (found.prefix, found.prefix_from) == (
        "unaligned-q",
        "commit record",
    )
    assert [t.transactional_id for t in found.transactions] == ["unaligned-q-0-1"]


def test_a_given_prefix_wins_and_without_records_the_default_is_used(
    checkpoint: Path, tmp_path: Path, asked: list[tuple[str, str]]
) -> None:
    given = build_view(
        Checkpoint.resolve(str(checkpoint)),
        kafka_client={"bootstrap_servers": "h:1"},
        transactional_id_prefix="mine",
    )
    assert given.open_transactions is not None
    assert given.open_transactions.prefix_from == "option"
    # the query's own ids under a given prefix carry its owner tag
    assert given.open_transactions.stem == id_stem("mine", QUERY_ID)
    files = new_checkpoint(tmp_path / "files")
    decide(files, 0, prepared=[{"staged": "s", "final": "f", "rows": 1}], participant="files")
    default = build_view(
        Checkpoint.resolve(str(files)), kafka_client={"bootstrap_servers": "h:2"}
    ).open_transactions
    assert default is not None and default.prefix_from == "default"
    assert asked == [("h:1", "mine"), ("h:2", f"unaligned-{QUERY_ID}")]


def test_open_transactions_are_described_and_matched_to_in_doubt_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kafka.admin import TransactionDescription, TransactionState

    monkeypatch.setattr(
        broker_transactions, "list_transactional_ids", lambda client, prefix: ["p-0-0", "p-1-0"]
    )
    described = TransactionDescription(1, TransactionState.ONGOING, 7, 2, 60_000, 123, set())
    monkeypatch.setattr(
        broker_transactions,
        "describe_transactions",
        lambda client, ids: {"p-0-0": described, "p-1-0": None},
    )
    found = broker_transactions.open_transactions(
        {"bootstrap_servers": "h:9092"}, "p", "p-qa", [InDoubtBatch(5, "kafka", 0, 1, ("p-0-0",))]
    )
    assert found == (
        OpenTransaction("p-0-0", "Ongoing", 7, 2, 123, 60_000, 5),  # named: this query's
        OpenTransaction("p-1-0", None, None, None, None, None, None, this_query=False),
    )


# --- not a checkpoint -------------------------------------------------------------------------


def test_a_missing_path_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpointError, match=f"{tmp_path / 'nope'} does not exist"):
        build_view(Checkpoint.resolve(str(tmp_path / "nope")))


def test_a_directory_without_metadata_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpointError, match="has no 'metadata' file"):
        build_view(Checkpoint.resolve(str(tmp_path)))


def test_unreadable_metadata_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text("not json")
    with pytest.raises(NotACheckpointError, match="metadata"):
        build_view(Checkpoint.resolve(str(tmp_path)))


def test_a_query_of_other_sources_and_sinks_is_not_ours(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "ck")
    plan(root, 0, [{"topic": {"0": 5}}])
    with pytest.raises(NotACheckpointError) as caught:
        build_view(Checkpoint.resolve(str(root)))
    assert str(root) in str(caught.value)
    assert "barrierToken" in str(caught.value) and "'unaligned/'" in str(caught.value)


def test_a_foreign_source_into_our_sink_is_a_checkpoint(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "ck")
    plan(root, 0, [json.loads('{"topic": {"0": 5}}')])
    decide(root, 0)
    view = build_view(Checkpoint.resolve(str(root)))
    assert view.sources == () and [b.sink for b in view.barriers] == ["done"]
