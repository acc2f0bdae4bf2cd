"""What the driver does at a barrier besides committing it: channel-state garbage, and what it
publishes once it committed (the channel state pending after it:
:mod:`unaligned.sink.pending_layout`).

Called by :meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.commit` (step 2) and, for
garbage collection, by :func:`unaligned.sink.stream_writer_factory.build_stream_writer` in
Spark's planner, always while no task of the query runs (what a task does at its barrier is
:mod:`unaligned.barriers.alignment`). ``messages`` are the batch's task commit messages, already
filtered to :class:`unaligned.sink.participant.SinkCommitMessage`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from unaligned._util.fs import resolve_location
from unaligned.barriers import idle as idle_barriers
from unaligned.barriers.barrier import end_of_data
from unaligned.barriers.metrics import TaskBarrierStats, record_barrier
from unaligned.barriers.offset_log import read_offset_log
from unaligned.channel_state.files import (
    delete_barrier_state,
    list_barrier_ids,
    list_state_files,
    query_state_dir,
)
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState
from unaligned.errors import BarrierError
from unaligned.finishing.final_checkpoint import barrier_committed
from unaligned.finishing.stop_request import link, query_key
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import SinkOptions

if TYPE_CHECKING:
    from unaligned.sink.participant import SinkCommitMessage

logger = logging.getLogger(__name__)


def collect_garbage(state_dir: str, keep: Sequence[ChannelStateRef]) -> int:
    """Delete every channel-state file under ``state_dir`` that no ref in ``keep`` points to.

    ``keep`` is the pending state of the newest commit record; everything else was replayed
    already, or was written by an attempt Spark failed or denied. Call only while no sink task
    of the query runs (the driver's commit, or recovery before a batch). Returns files removed.
    """
    locations = [ref.location() for ref in keep if isinstance(ref, FileChannelState)]
    kept_paths = {location.path for location in locations}
    removed = 0
    for barrier_id in list_barrier_ids(state_dir):
        files = list_state_files(state_dir, barrier_id)
        if not any(f.path in kept_paths for f in files):
            delete_barrier_state(state_dir, barrier_id)
            removed += len(files)
            continue
        filesystem = resolve_location(state_dir).filesystem
        for stale in (f for f in files if f.path not in kept_paths):
            try:
                filesystem.delete_file(stale.path)
                removed += 1
            except FileNotFoundError:
                pass
    if removed:
        logger.info("deleted %d channel-state file(s) no commit record needs", removed)
    return removed


def collect_channel_state_garbage(options: SinkOptions) -> None:
    """Delete channel-state files the newest commit record no longer references (replayed,
    or written by failed, denied, speculative or zombie attempts). Runs only when no task of
    the query runs. Lists and deletes only inside this query's own directory,
    ``<channelStatePath>/<query id>/`` (other queries may share ``channelStatePath``)."""
    log = CommitLog(options.checkpoint)
    decided = log.decided_batch_ids()
    latest = log.read(decided[-1]) if decided else None
    keep = [ref for refs in (latest.channel_state.values() if latest else ()) for ref in refs]
    try:
        query_id = options.checkpoint.query_id()
    except BarrierError as exc:
        logger.warning("channel-state garbage not collected: %s", exc)
        return
    collect_garbage(query_state_dir(options.alignment.state_dir, query_id), keep)


def after_barrier(
    options: SinkOptions, record: CommitRecord, messages: Sequence[SinkCommitMessage]
) -> None:
    """Step 2f, once barrier ``record.batch_id`` committed: its metrics
    (:mod:`unaligned.barriers.metrics`), the idle-barrier hint (:mod:`unaligned.barriers.idle`)
    and the stop-request links (:mod:`unaligned.finishing.stop_request`) for the source, and the
    ``finished`` marker of a final checkpoint (:mod:`unaligned.finishing.final_checkpoint`)."""
    checkpoint = options.checkpoint
    entry = read_offset_log(checkpoint, record.batch_id)
    offsets = [source.offset for source in entry.sources]
    tokens = idle_barriers.tokens_in(offsets)
    stats = [TaskBarrierStats.from_dict(dict(m.stats)) for m in messages if m.stats]
    if record_barrier(checkpoint, record.batch_id, entry.batch_timestamp_ms, stats) is not None:
        link(query_key(checkpoint.query_id()), checkpoint)  # the monitoring listener reads it
    pending_rows = sum(ref.remaining_rows for refs in record.channel_state.values() for ref in refs)
    idle_barriers.publish_pending(tokens, record.batch_id, pending_rows)
    for token in tokens:
        link(token, checkpoint)
    barrier_committed(
        checkpoint, record.batch_id, final=end_of_data(offsets), pending_rows=pending_rows
    )
