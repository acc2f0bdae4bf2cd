"""The channel state pending after a barrier, for its commit record, when the sink's task
count stays, changes behind a shuffle, or changes in a batch that reads nothing
(:mod:`unaligned.sink.pending_layout`). Real commit records on a local checkpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from unaligned.channel_state.refs import ChannelStateRef, InlineChannelState
from unaligned.checkpoint import Checkpoint
from unaligned.errors import PendingStateLayoutError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import PendingPolicy
from unaligned.sink.participant import SinkCommitMessage, TaskOutcome
from unaligned.sink.pending_layout import pending_after, reassign_pending, unmappable

REFUSE, REASSIGN = PendingPolicy.REFUSE, PendingPolicy.REASSIGN


def state(barrier_id: int, task: int, rows: int) -> ChannelStateRef:
    return InlineChannelState(
        barrier_id=barrier_id,
        task_index=task,
        query_id="q",
        write_id=f"w{barrier_id}-{task}",
        row_count=rows,
        byte_size=0,
        crc32=0,
        inline_avro=b"",
    )


def message(
    batch_id: int, partition: int, pending: Sequence[ChannelStateRef] = ()
) -> SinkCommitMessage:
    return SinkCommitMessage(
        batch_id=batch_id,
        partition_id=partition,
        attempt_number=0,
        rows=0,
        outcome=TaskOutcome.PREPARED,
        prepared={"task": partition},
        pending=tuple(pending),
    )


@pytest.fixture
def log(tmp_path: Path) -> CommitLog:
    return CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))


def decide(
    log: CommitLog,
    batch_id: int,
    channel_state: Mapping[int, Sequence[ChannelStateRef]],
    task_count: int | None = None,
) -> None:
    record = CommitRecord(
        batch_id,
        "files",
        (),
        0,
        {index: tuple(refs) for index, refs in channel_state.items()},
        task_count,
    )
    assert log.write(record)


def tasks(
    batch_id: int, count: int, **pending: Sequence[ChannelStateRef]
) -> list[SinkCommitMessage]:
    return [message(batch_id, i, pending.get(f"t{i}", ())) for i in range(count)]


# --- the same layout ---------------------------------------------------------------------------


def test_first_barrier_keeps_each_tasks_new_state_and_records_the_task_count(
    log: CommitLog,
) -> None:
    a, b = state(0, 0, 5), state(0, 2, 7)
    pending, count = pending_after(
        log, tasks(0, 3, t0=[a], t2=[b]), 0, reads_nothing=False, policy=REFUSE
    )
    assert pending == {0: (a,), 2: (b,)} and count == 3
    decide(log, 0, pending, count)
    record = log.read(0)
    assert record is not None and record.channel_state == pending and record.task_count == 3


def test_state_of_tasks_that_ran_again_is_replaced_by_what_they_returned(log: CommitLog) -> None:
    old0, old1 = state(1, 0, 10), state(1, 1, 10)
    decide(log, 1, {0: [old0], 1: [old1]}, 2)
    carried = old1.advanced(4)
    pending, _ = pending_after(
        log, tasks(2, 2, t1=[carried]), 2, reads_nothing=False, policy=REFUSE
    )
    assert pending == {1: (carried,)}


def test_only_the_newest_record_before_the_barrier_counts(log: CommitLog) -> None:
    decide(log, 1, {4: [state(1, 4, 1)]}, 8)
    newest = state(3, 5, 2)
    decide(log, 3, {5: [newest]}, 8)
    decide(log, 5, {6: [state(5, 6, 3)]}, 8)  # barrier 5's own record: not inherited
    pending, _ = pending_after(log, tasks(5, 2), 5, reads_nothing=False, policy=REASSIGN)
    assert pending == {1: (newest,)}  # 5 % 2: only barrier 3's record was inherited


def test_records_without_a_task_count_map_state_whose_tasks_ran(log: CommitLog) -> None:
    a = state(1, 1, 3)
    decide(log, 1, {1: [a]})  # written before records kept their task count
    assert unmappable(log.read(1), 2, reads_nothing=False) is None
    assert unmappable(log.read(1), 4, reads_nothing=False) is None


# --- another task count: refused, unless the batch reads nothing or the user opts in ------------


def test_fewer_tasks_than_the_pending_state_needs_is_refused_before_anything_moves(
    log: CommitLog,
) -> None:
    decide(log, 1, {2: [state(1, 2, 3)], 3: [state(1, 3, 4)]}, 4)
    for reads_nothing in (False, True):
        with pytest.raises(PendingStateLayoutError) as raised:
            pending_after(log, tasks(2, 2), 2, reads_nothing=reads_nothing, policy=REFUSE)
        text = str(raised.value)
        assert "batch 2 is not decided: 7 row(s) of channel state are pending" in text
        assert "sink task(s) [2, 3] of a 4-task layout (left by barrier 1)" in text
        assert "this batch has 2 sink task(s)" in text
        assert "trigger(availableNow=True)" in text and "pendingStateOnRescale=reassign" in text


def test_more_tasks_behind_a_shuffle_is_refused_while_new_rows_arrive(log: CommitLog) -> None:
    decide(log, 1, {0: [state(1, 0, 3)]}, 2)
    with pytest.raises(PendingStateLayoutError, match="another task count sends a key"):
        pending_after(log, tasks(2, 4), 2, reads_nothing=False, policy=REFUSE)


def test_a_batch_that_reads_nothing_writes_state_of_a_smaller_layout_with_more_tasks(
    log: CommitLog,
) -> None:
    a, b = state(1, 0, 3), state(1, 1, 4)
    decide(log, 1, {0: [a], 1: [b]}, 2)
    # a layout drain: no new row, each index replayed by its own task, which cuts nothing
    pending, count = pending_after(log, tasks(2, 4), 2, reads_nothing=True, policy=REFUSE)
    assert pending == {} and count == 4


def test_nothing_pending_maps_to_any_layout(log: CommitLog) -> None:
    decide(log, 1, {}, 4)
    pending, count = pending_after(log, tasks(2, 2), 2, reads_nothing=False, policy=REFUSE)
    assert pending == {} and count == 2


def test_the_opt_in_moves_state_of_vanished_tasks_ahead_of_the_survivors_state(
    log: CommitLog,
) -> None:
    orphan2, orphan3 = state(1, 2, 3), state(1, 3, 4)
    decide(log, 1, {2: [orphan2], 3: [orphan3]}, 4)
    new1 = state(2, 1, 6)
    pending, count = pending_after(
        log, tasks(2, 2, t1=[new1]), 2, reads_nothing=False, policy=REASSIGN
    )
    assert pending == {0: (orphan2,), 1: (orphan3, new1)} and count == 2


def test_reassign_pending_moves_state_of_vanished_tasks_to_j_mod_n() -> None:
    a, b, c = state(1, 0, 1), state(1, 3, 1), state(2, 1, 1)
    previous = {0: (a,), 3: (b,)}
    assert reassign_pending(previous, {1: (c,)}, task_count=2) == {1: (b, c)}
    assert reassign_pending(previous, {}, task_count=4) == {}  # tasks 0 and 3 ran
    assert reassign_pending(previous, {}, task_count=0) == previous
