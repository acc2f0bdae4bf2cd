"""What the driver does at a barrier with channel state, metrics and idle-barrier hints.

Called by :meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.commit` (step 2) and, for
garbage collection, by :func:`unaligned.sink.two_phase_commit.build_stream_writer` in Spark's planner.
Every function here runs on the driver while no task of the query runs. ``messages`` are the
batch's task commit messages, already filtered to
:class:`unaligned.sink.participant.SinkCommitMessage` (``None`` and foreign messages dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from unaligned.barriers import idle as idle_barriers
from unaligned.barriers.barrier import wall_clock_ms
from unaligned.barriers.metrics import TaskBarrierStats, aggregate, write_metrics
from unaligned.barriers.offset_log import read_offset_log
from unaligned.barriers.task_side import collect_garbage, reassign_pending
from unaligned.channel_state.refs import ChannelStateRef
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import SinkOptions

if TYPE_CHECKING:
    from unaligned.sink.participant import SinkCommitMessage

logger = logging.getLogger(__name__)


def pending_after(
    log: CommitLog, messages: Sequence[SinkCommitMessage], batch_id: int
) -> dict[int, tuple[Mapping[str, Any], ...]]:
    """The channel state pending after barrier ``batch_id``, per task index, for its record.

    The previous record's pending refs are carried over and reassigned with each task's new
    pending refs (:func:`unaligned.barriers.task_side.reassign_pending`), over ``len(messages)``
    task indices.
    """
    previous = log.latest_before(batch_id)
    previous_state = {
        index: tuple(refs) for index, refs in (previous.channel_state.items() if previous else ())
    }
    new = {m.partition_id: tuple(m.pending) for m in messages}
    return reassign_pending(previous_state, new, len(messages))  # type: ignore[arg-type]


def collect_channel_state_garbage(options: SinkOptions) -> None:
    """Delete channel-state files the newest commit record no longer references (replayed,
    or written by failed and denied attempts). Runs only when no task of the query runs."""
    log = CommitLog.under_checkpoint(options.checkpoint_location)
    decided = log.decided_batch_ids()
    latest = log.read(decided[-1]) if decided else None
    keep = [
        ChannelStateRef.from_dict(dict(ref))
        for refs in (latest.channel_state.values() if latest else ())
        for ref in refs
    ]
    collect_garbage(options.alignment.state_dir, keep)


def after_barrier(
    options: SinkOptions, record: CommitRecord, messages: Sequence[SinkCommitMessage]
) -> None:
    """Metrics of the barrier, and the idle-barrier hint for the source (liveness only)."""
    entry = read_offset_log(options.checkpoint_location, record.batch_id)
    stats = [TaskBarrierStats.from_dict(dict(m.stats)) for m in messages if m.stats]
    if stats:
        metrics = aggregate(record.batch_id, entry.batch_timestamp_ms, int(wall_clock_ms()), stats)
        write_metrics(options.checkpoint_location, metrics)
    pending_rows = sum(
        ChannelStateRef.from_dict(dict(ref)).remaining_rows
        for refs in record.channel_state.values()
        for ref in refs
    )
    hint = idle_barriers.PendingHint(record.batch_id, pending_rows) if pending_rows else None
    for token in idle_barriers.tokens_in(source.offset for source in entry.sources):
        idle_barriers.publish(token, hint)
