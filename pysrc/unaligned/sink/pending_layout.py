"""The channel state pending after a barrier, per sink task index, and what happens to it when
the number of sink tasks changes (the decision's view, step 2b).

Task ``i`` of barrier ``N`` replays what task ``i`` of the barrier before left pending. That
keeps per-key order while the rows of a key reach the same task index in every batch: without a
shuffle, the source keeps each topic-partition on its read task and drains its layout before
changing it (:mod:`unaligned.source.planning.task_layout`); behind a shuffle (``repartition``, an
aggregation) the sink's tasks are Spark's, keyed by a hash over their count. Each commit record
keeps how many tasks its batch had (``taskCount``); :func:`pending_after` compares it with this
batch's. Pending state is *mappable* when every task index holding it ran in this batch and the
count did not change, or the batch brings no new row at all (every source in a layout drain).
Otherwise the batch is not decided (:class:`~unaligned.errors.PendingStateLayoutError`: nothing
was committed, the transactions are aborted, and the message names the way out), unless the
sink's ``pendingStateOnRescale=reassign``: state of a vanished index then moves to task
``index mod n`` (:func:`reassign_pending`), where order no longer holds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from unaligned.channel_state.refs import ChannelStateRef
from unaligned.errors import PendingStateLayoutError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import PendingPolicy

if TYPE_CHECKING:
    from unaligned.sink.participant import SinkCommitMessage

logger = logging.getLogger(__name__)

PendingState = dict[int, tuple[ChannelStateRef, ...]]


def reassign_pending(
    previous: Mapping[int, tuple[ChannelStateRef, ...]],
    new: Mapping[int, tuple[ChannelStateRef, ...]],
    task_count: int,
) -> PendingState:
    """The pending state after a barrier, per task index.

    ``new`` is what the batch's tasks returned. State of an earlier task index that no task of
    this batch had moves to task ``j mod task_count``, ahead of that task's own pending state:
    written one barrier later than rows of the same keys that task wrote in this batch, so
    only :func:`pending_after` with ``pendingStateOnRescale=reassign`` lets that happen.
    """
    if task_count <= 0:
        return {index: tuple(refs) for index, refs in previous.items() if refs}
    result: dict[int, list[ChannelStateRef]] = {}
    for index in sorted(previous):
        if index < task_count:
            continue  # that task ran: it replayed or carried its state itself
        if previous[index]:
            result.setdefault(index % task_count, []).extend(previous[index])
    for index, refs in new.items():
        result.setdefault(index, []).extend(refs)
    return {index: tuple(refs) for index, refs in sorted(result.items()) if refs}


def unmappable(previous: CommitRecord | None, task_count: int, reads_nothing: bool) -> str | None:
    """Why the state ``previous`` left pending cannot go to this batch's ``task_count`` tasks
    as it is (``None``: it can). ``reads_nothing``: no source of the batch brings a new row."""
    if previous is None or task_count <= 0:
        return None
    pending = {index: refs for index, refs in previous.channel_state.items() if refs}
    if not pending:
        return None
    rows = sum(ref.remaining_rows for refs in pending.values() for ref in refs)
    laid_out = "" if previous.task_count is None else f" of a {previous.task_count}-task layout"
    held = (
        f"{rows} row(s) of channel state are pending for sink task(s) "
        f"{sorted(pending)}{laid_out} (left by barrier {previous.batch_id})"
    )
    if max(pending) >= task_count:
        return f"{held}, and this batch has {task_count} sink task(s): no task replays some of it"
    if previous.task_count not in (None, task_count) and not reads_nothing:
        return (
            f"{held}, and this batch has {task_count} sink task(s): behind a shuffle another "
            "task count sends a key to another task, whose new rows could overtake the "
            "pending ones"
        )
    return None


def pending_after(
    log: CommitLog,
    messages: Sequence[SinkCommitMessage],
    batch_id: int,
    *,
    reads_nothing: bool,
    policy: PendingPolicy,
) -> tuple[PendingState, int | None]:
    """The channel state pending after barrier ``batch_id``, per task index, and the task count
    it is laid out for, for the batch's commit record. Raises
    :class:`~unaligned.errors.PendingStateLayoutError` before anything is decided when the
    previous record's pending state is not mappable (module docstring) and ``policy`` is
    ``refuse``."""
    previous = log.latest_before(batch_id)
    previous_state = {
        index: tuple(refs) for index, refs in (previous.channel_state.items() if previous else ())
    }
    new = {m.partition_id: tuple(m.pending) for m in messages}
    task_count = len(messages)
    problem = unmappable(previous, task_count, reads_nothing)
    if problem is not None and policy is PendingPolicy.REFUSE:
        raise PendingStateLayoutError(
            f"batch {batch_id} is not decided: {problem}. Nothing of the batch was committed and "
            "no pending row was moved. Way out: run the query with its old settings (the old "
            "sink task count: the old repartition / spark.sql.shuffle.partitions, the old "
            "readTasks) until nothing is pending - trigger(availableNow=True), or "
            "unaligned.stop(query, checkpoint, drain=True) - and then start it with the new "
            "ones (`unaligned inspect CHECKPOINT` shows pendingChannelState). Where order cannot "
            "matter and the sink's input has no key column, the sink option "
            "pendingStateOnRescale=reassign moves the state to task index mod n instead"
        )
    if problem is not None:
        logger.warning(
            "batch %d: %s; reassigned (pendingStateOnRescale=reassign)", batch_id, problem
        )
    # a batch without sink tasks keeps the state, and the count it is laid out for
    laid_out = task_count if task_count > 0 else (previous.task_count if previous else None)
    return reassign_pending(previous_state, new, task_count), laid_out
