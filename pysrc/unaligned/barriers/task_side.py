"""What one sink task does at its barrier: aligned or unaligned (Flink FLIP-76, in a Spark sink).

Every micro-batch is a barrier (:class:`unaligned.barriers.barrier.Barrier`: the batch id and the
batch start fixed on the driver). A sink task at barrier *N*:

1. Replays the channel state it inherited from barrier *N-1* (the rows an earlier cut left
   pending for this task index), in order, before any new row, inside the same transaction.
2. Writes its new input, chunk by chunk (``chunkRows``).
3. Checks the barrier between chunks. In ``unaligned`` mode, once the deadline (batch start +
   ``alignedCheckpointTimeout``) has passed, the barrier overtakes the rows still in flight:
   the task stops writing to the external system and

   - carries the rest of the inherited state forward *by reference* (same file, later
     ``start_row``; never rewritten), and
   - drains the rest of its input into one new channel-state file (Avro, streamed, bounded
     memory; inline in the commit record when small).

   The task then pre-commits what it wrote; the driver's commit record makes the pending state
   part of the checkpoint (:mod:`unaligned.barriers.driver_side`), and barrier *N+1* replays
   it (step 1).

Guarantees and rules:

- Order: rows leave a task in input order: inherited state (oldest first), then new rows,
  whatever is cut. With a stable sink-input partitioning (the source plans one task per Kafka
  partition, in a stable order), per-key and per-partition order holds across barriers.
- Progress: a task writes at least one chunk before it checks the deadline, so even a task
  that starts after its deadline (a re-run, a long queue) moves pending state forward.
- ``maxInflightBytes`` (Flink's UNALIGNED_WITH_MAX_INFLIGHT_DATA): a task whose inherited state
  is above it does not cut at this barrier; it writes aligned until it is back under.
- ``aligned`` mode never cuts: Spark's own behaviour.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from unaligned import crash_points
from unaligned.barriers.barrier import Barrier, Deadline
from unaligned.barriers.metrics import TaskBarrierStats
from unaligned.channel_state.reader import read_channel_state
from unaligned.channel_state.refs import ChannelStateRef, InlineChannelState
from unaligned.channel_state.writer import ChannelStateWriter
from unaligned.crash_points import FailPoint

logger = logging.getLogger(__name__)

WriteChunk = Callable[[pa.RecordBatch], None]
"""Writes one chunk to the external system inside the task's transaction / staging file."""


class CheckpointMode(enum.Enum):
    ALIGNED = "aligned"
    """Write every row before the batch commits (Spark's behaviour)."""
    UNALIGNED = "unaligned"
    """Cut at the deadline; rows still in flight become channel state."""


@dataclass(frozen=True)
class AlignmentSettings:
    """The sink options that govern barriers (parsed by :mod:`unaligned.sink.options`)."""

    mode: CheckpointMode
    timeout_ms: int
    """``alignedCheckpointTimeout``, measured from the batch start."""
    max_inflight_bytes: int
    chunk_rows: int
    state_dir: str
    """Where channel-state files go (``<checkpoint>/unaligned/channel-state`` by default)."""
    codec: str
    inline_threshold_bytes: int


@dataclass(frozen=True)
class TaskBarrierOutcome:
    """What the task leaves for the next barrier, and what it did at this one."""

    pending: tuple[ChannelStateRef, ...]
    """State the same task index replays next, oldest first (carried-forward refs first)."""
    stats: TaskBarrierStats


def inherited_bytes(refs: Iterable[ChannelStateRef]) -> int:
    """Bytes of inherited state still to replay (proportional to the remaining rows)."""
    total = 0
    for ref in refs:
        if ref.row_count:
            total += ref.byte_size * ref.remaining_rows // ref.row_count
    return total


def chunks(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    """Zero-copy slices of at most ``rows`` rows."""
    for offset in range(0, batch.num_rows, rows):
        yield batch.slice(offset, rows)


class BarrierAlignment:
    """One sink task attempt at one barrier. Use once: :meth:`run`.

    ``task_index`` is the Spark partition id of the sink task, ``attempt_number`` its attempt
    (0 first); ``attempt_id`` is unique among attempts (Spark's ``taskAttemptId``) and names
    the temporary channel-state file.
    ``inherited`` is this task index's pending state from the previous barrier's commit
    record, oldest first. Replayed rows keep the Arrow schema stored with them; new state takes
    the schema of the input batches.
    """

    def __init__(
        self,
        settings: AlignmentSettings,
        barrier: Barrier,
        deadline: Deadline,
        task_index: int,
        attempt_number: int,
        attempt_id: str,
        inherited: Sequence[ChannelStateRef],
    ) -> None:
        self._settings = settings
        self._barrier = barrier
        self._deadline = deadline
        self._task_index = task_index
        self._attempt_number = attempt_number
        self._attempt_id = attempt_id
        self._inherited = tuple(inherited)

    def _may_cut(self) -> bool:
        if self._settings.mode is not CheckpointMode.UNALIGNED:
            return False
        pending = inherited_bytes(self._inherited)
        if pending > self._settings.max_inflight_bytes:
            logger.info(
                "barrier %d task %d: %d bytes of channel state pending (> maxInflightBytes "
                "%d): writing aligned until it drains",
                self._barrier.batch_id,
                self._task_index,
                pending,
                self._settings.max_inflight_bytes,
            )
            return False
        return True

    def _new_state_writer(self, schema: pa.Schema) -> ChannelStateWriter:
        return ChannelStateWriter(
            state_dir=self._settings.state_dir,
            barrier_id=self._barrier.batch_id,
            query_id=self._barrier.query_id,
            task_index=self._task_index,
            attempt=self._attempt_id,
            schema=schema,
            codec=self._settings.codec,
            inline_threshold_bytes=self._settings.inline_threshold_bytes,
            chunk_rows=self._settings.chunk_rows,
        )

    def run(
        self,
        input_batches: Iterator[pa.RecordBatch],
        write_chunk: WriteChunk,
        clock: Callable[[], float],
    ) -> TaskBarrierOutcome:
        """Replay, write, cut if due; return what stays pending. Nothing is committed here."""
        started_ms = int(clock())
        may_cut = self._may_cut()
        chunk_rows = self._settings.chunk_rows
        written = replayed = carried_rows = spilled = 0
        cut = False
        pending: list[ChannelStateRef] = []

        # 1. Replay inherited state, oldest first; after a cut, carry the rest by reference.
        for ref in self._inherited:
            if cut:
                pending.append(ref)
                carried_rows += ref.remaining_rows
                continue
            consumed = 0
            for chunk in read_channel_state(ref, batch_rows=chunk_rows):
                write_chunk(chunk)
                consumed += chunk.num_rows
                crash_points.fail_first_attempt(
                    FailPoint.TASK_DURING_REPLAY, self._barrier.batch_id, self._attempt_number
                )
                if may_cut and self._deadline.expired():
                    cut = True
                    break
            replayed += consumed
            if cut:
                rest = ref.advanced(consumed)
                if not rest.exhausted:
                    pending.append(rest)
                    carried_rows += rest.remaining_rows
        written += replayed

        # 2. New input; 3. after a cut, drain the rest into one new channel-state file.
        state: ChannelStateWriter | None = None
        try:
            for batch in input_batches:
                for chunk in chunks(batch, chunk_rows):
                    if cut:
                        if state is None:
                            state = self._new_state_writer(chunk.schema)
                        state.append(chunk)
                        spilled += chunk.num_rows
                        continue
                    write_chunk(chunk)
                    written += chunk.num_rows
                    if may_cut and self._deadline.expired():
                        cut = True
            new_state = state.finish() if state is not None else None
        except BaseException:
            if state is not None:
                state.discard()
            raise

        file_bytes = inline_bytes = 0
        if new_state is not None:
            pending.append(new_state)
            if isinstance(new_state, InlineChannelState):
                inline_bytes = new_state.byte_size
            else:
                file_bytes = new_state.byte_size
        if cut:
            logger.info(
                "barrier %d task %d: cut at %.0f ms after the batch start: %d rows written "
                "(%d replayed), %d carried forward, %d spilled",
                self._barrier.batch_id,
                self._task_index,
                self._deadline.elapsed_ms(),
                written,
                replayed,
                carried_rows,
                spilled,
            )
        stats = TaskBarrierStats(
            task_index=self._task_index,
            start_ms=started_ms,
            cut=cut,
            rows_written=written,
            rows_replayed=replayed,
            rows_carried=carried_rows,
            rows_spilled=spilled,
            state_file_bytes=file_bytes,
            state_inline_bytes=inline_bytes,
        )
        return TaskBarrierOutcome(tuple(pending), stats)
