"""What one sink task does at its barrier: aligned or unaligned (Flink FLIP-76, in a Spark sink).

:class:`BarrierAlignment` replays the channel state the task inherited, writes its new input
chunk by chunk (:mod:`unaligned.barriers.chunking`) and, in ``unaligned`` mode once the deadline
has passed, carries the rest of the inherited state forward by reference and drains the rest of
its input into new channel state (:mod:`unaligned.channel_state`). :class:`AlignmentSettings`
and :class:`CheckpointMode` are the sink options it follows. The steps, order and progress
guarantees, ``maxInflightBytes`` and schema changes: ARCHITECTURE.md, "Module notes",
``barriers/alignment.py``.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from unaligned._util import crash_points
from unaligned._util.crash_points import FailPoint
from unaligned.barriers.barrier import Barrier, Deadline
from unaligned.barriers.chunking import ChunkSizer
from unaligned.barriers.metrics import TaskBarrierStats
from unaligned.channel_state.files import query_state_dir
from unaligned.channel_state.refs import ChannelStateRef, InlineChannelState

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

    from unaligned.channel_state.writer import ChannelStateWriter

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
    """``channelStatePath`` (``<checkpoint>/unaligned/channel-state`` by default): each query's
    files go to ``<state_dir>/<query id>/`` (:func:`unaligned.channel_state.files.query_state_dir`).
    """
    codec: str
    inline_threshold_bytes: int
    max_state_files: int = 8
    """``channelStateMaxFiles``: at most this many pending state refs per task after a cut; past
    it, the newest carried-forward refs are merged into the new state (step 3a)."""
    merge_below_bytes: int = 16 * 1024 * 1024
    """``channelStateMergeBelow``: carried-forward state smaller than this is merged into the
    new state at a cut (step 3a) instead of being carried by reference."""


@dataclass(frozen=True)
class TaskBarrierOutcome:
    """What the task leaves for the next barrier, and what it did at this one."""

    pending: tuple[ChannelStateRef, ...]
    """State the same task index replays next, oldest first (carried-forward refs first)."""
    stats: TaskBarrierStats


def merge_plan(carried: Sequence[ChannelStateRef], max_files: int, merge_below_bytes: int) -> int:
    """Step 3a: how many of the newest ``carried`` refs to merge into the new state at a cut
    (their rows first, then the drained input: order kept). All of them while their rows left
    weigh less than ``merge_below_bytes`` (many small files become one); otherwise as many of
    the newest as keep the task at ``max_files`` refs with the new state (large old state stays
    by reference, not rewritten)."""
    if not carried:
        return 0
    if inherited_bytes(carried) < merge_below_bytes:
        return len(carried)
    kept = max(max_files - 1, 1)
    return max(len(carried) - kept, 0)


def inherited_bytes(refs: Iterable[ChannelStateRef]) -> int:
    """Bytes of inherited state still to replay (proportional to the remaining rows)."""
    total = 0
    for ref in refs:
        if ref.row_count:
            total += ref.byte_size * ref.remaining_rows // ref.row_count
    return total


class BarrierAlignment:
    """One sink task attempt at one barrier. Use once: :meth:`run`.

    ``task_index`` is the Spark partition id of the sink task, ``attempt_number`` its attempt
    (0 first); ``attempt_id`` (Spark's ``taskAttemptId``) goes into the names of the
    channel-state files it writes.
    ``inherited`` is this task index's pending state from the previous barrier's commit
    record, oldest first. New state takes the schema of the input batches.

    Replayed rows are mapped by name onto the sink's current input schema: the first input
    batch's, else ``input_schema`` (the sink input as Spark declared it, for a task with no
    input; :func:`arrow_input_schema`). Without either they keep the schema stored with them.
    ``sink_columns`` are the input columns the sink writes out (``None``: all of them): a
    stored column outside them may be gone from the current input.
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
        *,
        input_schema: pa.Schema | None = None,
        sink_columns: Collection[str] | None = None,
    ) -> None:
        self._settings = settings
        self._barrier = barrier
        self._deadline = deadline
        self._task_index = task_index
        self._attempt_number = attempt_number
        self._attempt_id = attempt_id
        self._inherited = tuple(inherited)
        self._input_schema = input_schema
        self._sink_columns = sink_columns

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
        # Avro (fastavro) only in a task that spills: the planner and the commit runner import
        # this module for its settings and never load the channel-state codecs.
        from unaligned.channel_state.writer import ChannelStateWriter

        return ChannelStateWriter(
            state_dir=query_state_dir(self._settings.state_dir, self._barrier.query_id),
            barrier_id=self._barrier.batch_id,
            query_id=self._barrier.query_id,
            task_index=self._task_index,
            attempt=self._attempt_id,
            schema=schema,
            codec=self._settings.codec,
            inline_threshold_bytes=self._settings.inline_threshold_bytes,
            chunk_rows=self._settings.chunk_rows,
        )

    def _merging_writer(
        self, merging: Sequence[ChannelStateRef], target_schema: pa.Schema | None
    ) -> ChannelStateWriter:
        """A state writer for merged refs alone: the input's schema, else the stored one."""
        if target_schema is not None:
            return self._new_state_writer(target_schema)
        from unaligned.channel_state.reader import read_channel_state

        first = next(iter(read_channel_state(merging[0], batch_rows=1)))
        return self._new_state_writer(first.schema)

    def _merge_into(
        self,
        state: ChannelStateWriter,
        merging: Sequence[ChannelStateRef],
        target_schema: pa.Schema | None,
    ) -> int:
        """Step 3a: the rows ``merging`` still holds, oldest first, into ``state`` (before any
        drained input row); returns how many."""
        from unaligned.channel_state.reader import read_channel_state

        rows = 0
        for ref in merging:
            for chunk in read_channel_state(
                ref,
                batch_rows=self._settings.chunk_rows,
                target_schema=target_schema,
                sink_columns=self._sink_columns,
            ):
                state.append(chunk)
                rows += chunk.num_rows
                crash_points.reach(
                    crash_points.CrashPoint.TASK_DURING_MERGE, self._barrier.batch_id
                )
        return rows

    def _current_schema(
        self, input_batches: Iterator[pa.RecordBatch]
    ) -> tuple[Iterator[pa.RecordBatch], pa.Schema | None]:
        """The sink input's schema that replayed rows must take, and the input (unchanged).

        Only with state to replay is the first input batch taken ahead (Spark pulls the input
        ahead of the sink anyway); its schema is exact, nullability included."""
        if all(ref.exhausted for ref in self._inherited):
            return input_batches, self._input_schema
        first = next(input_batches, None)
        if first is None:
            if self._input_schema is None:
                logger.warning(
                    "barrier %d task %d: no input and no input schema: channel state is "
                    "replayed with the columns it was stored with",
                    self._barrier.batch_id,
                    self._task_index,
                )
            return input_batches, self._input_schema
        return itertools.chain([first], input_batches), first.schema

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
        input_batches, target_schema = self._current_schema(iter(input_batches))

        # 1. Replay inherited state, oldest first; after a cut, carry the rest by reference.
        for ref in self._inherited:
            if cut:
                pending.append(ref)
                carried_rows += ref.remaining_rows
                continue
            consumed = 0
            from unaligned.channel_state.reader import read_channel_state

            replay = read_channel_state(
                ref,
                batch_rows=chunk_rows,
                target_schema=target_schema,
                sink_columns=self._sink_columns,
            )
            for chunk in replay:
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

        # 3a. After a cut in the replay, the newest carried refs (all, when small) go into
        # the new state ahead of the drained input: the task's pending state stays a few files.
        merging = (
            pending[
                len(pending)
                - merge_plan(
                    pending, self._settings.max_state_files, self._settings.merge_below_bytes
                ) :
            ]
            if cut
            else []
        )
        if merging:
            pending = pending[: len(pending) - len(merging)]
            carried_rows -= sum(ref.remaining_rows for ref in merging)
        merged = 0

        # 2. New input; 3. after a cut, drain the rest into one new channel-state file.
        state: ChannelStateWriter | None = None
        sizer = ChunkSizer(chunk_rows, self._deadline if may_cut else None, lambda: clock() / 1000)
        try:
            for batch in input_batches:
                offset = 0
                while offset < batch.num_rows:
                    if cut:
                        rest = batch.slice(offset)
                        if state is None:
                            state = self._new_state_writer(rest.schema)
                            merged = self._merge_into(state, merging, target_schema)
                        state.append(rest)
                        spilled += rest.num_rows
                        break
                    chunk = batch.slice(offset, sizer.next_rows(batch.num_rows - offset))
                    offset += chunk.num_rows
                    began = sizer.timer()
                    write_chunk(chunk)
                    sizer.record(chunk.num_rows, sizer.timer() - began)
                    written += chunk.num_rows
                    if may_cut and self._deadline.expired():
                        cut = True
            if state is None and merging:  # no input after the cut: the merged refs alone
                state = self._merging_writer(merging, target_schema)
                merged = self._merge_into(state, merging, target_schema)
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
                "(%d replayed), %d carried forward, %d merged from %d file(s), %d spilled",
                self._barrier.batch_id,
                self._task_index,
                self._deadline.elapsed_ms(),
                written,
                replayed,
                carried_rows,
                merged,
                len(merging),
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
            rows_merged=merged,
            state_file_bytes=file_bytes,
            state_inline_bytes=inline_bytes,
        )
        return TaskBarrierOutcome(tuple(pending), stats)


def arrow_input_schema(schema: StructType, timezone: str = "UTC") -> pa.Schema:
    """The Arrow schema Spark gives the sink's input batches for the Spark ``schema`` (as
    ``mapInArrow`` does: nullability at every level; timestamps in ``timezone``, which only
    labels the same instants). For :class:`BarrierAlignment`'s ``input_schema``."""
    return pa.schema(
        [pa.field(f.name, _arrow_type(f.dataType, timezone), f.nullable) for f in schema.fields]
    )


def _arrow_type(data_type: DataType, timezone: str) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return pa.struct(
            [
                pa.field(f.name, _arrow_type(f.dataType, timezone), f.nullable)
                for f in data_type.fields
            ]
        )
    if isinstance(data_type, ArrayType):
        element = _arrow_type(data_type.elementType, timezone)
        return pa.list_(pa.field("element", element, data_type.containsNull))
    if isinstance(data_type, MapType):
        return pa.map_(
            _arrow_type(data_type.keyType, timezone),
            pa.field(
                "value", _arrow_type(data_type.valueType, timezone), data_type.valueContainsNull
            ),
        )
    return to_arrow_type(data_type, timezone=timezone)
