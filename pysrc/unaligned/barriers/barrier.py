"""Barriers: a Spark micro-batch seen as a Flink checkpoint barrier, and the deadline it sets.

In unaligned mode the barrier of batch ``N`` is the batch itself: its id is Spark's batch id and
its start time is ``batchTimestampMs``, which the driver fixes once and writes to Spark's offset
log ``<checkpoint>/offsets/<N>`` *before* any task of the batch runs. Every task of the batch
(and every retry of a task, and a re-run of the batch after a restart) therefore reads the same
start time, so an ``alignedCheckpointTimeout`` is measured from the batch start, not from when
a task happened to start (Flink's FLINK-23041: a timeout counted per task lets a late task
spend the whole timeout again).

Spark's offset log is read by :mod:`unaligned.barriers.offset_log`.

Restart note (checked with pyspark 4.3.0): after a restart Spark re-runs the last uncommitted
batch from its existing offset log entry, so that batch keeps the ``batchTimestampMs`` of the
run that planned it (a checkpoint left for 20 minutes re-ran its batch with a start time 20
minutes old). Measured from that start, the deadline of a re-run batch has passed before any
task starts; :meth:`Barrier.deadline` takes ``not_before_ms`` (e.g. when this run started) to
measure a re-run batch from no earlier than that.

Clock note: the deadline compares an executor's wall clock with a start time taken from the
driver's wall clock; skew between hosts shifts every task's cut by the same amount.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unaligned.barriers.idle import tokens_in
from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import Checkpoint
from unaligned.errors import OptionError

logger = logging.getLogger(__name__)


END_OF_DATA_KEY = "endOfData"
LAYOUT_DRAIN_KEY = "layoutDrain"
"""A source's layout drain (``unaligned.source.planning.task_layout``): a batch that reads
nothing at the previous task layout, before the layout changes. Spelled here too: barriers sit
below source."""
SPLIT_RANGES_KEY = "splitRanges"
"""A source whose ranges are split into pieces (``minPartitions``): no stable task layout."""

#: A clock returning wall-clock time in epoch milliseconds.
Clock = Callable[[], float]


def wall_clock_ms() -> float:
    """Wall-clock time in epoch milliseconds (the unit of ``batchTimestampMs``)."""
    return time.time() * 1000.0


# --- barrier and deadline -------------------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """``start_ms + timeout_ms`` on a wall clock (epoch milliseconds).

    Measured from the batch start fixed on the driver, never from the task start.
    """

    start_ms: int
    timeout_ms: int
    clock: Clock = field(default=wall_clock_ms, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.timeout_ms < 0:
            raise OptionError(f"alignedCheckpointTimeout must be >= 0 ms, got {self.timeout_ms}")

    @property
    def deadline_ms(self) -> int:
        return self.start_ms + self.timeout_ms

    def elapsed_ms(self) -> float:
        """Milliseconds since the start (negative if this clock is behind the driver's)."""
        return self.clock() - self.start_ms

    def expired(self) -> bool:
        """True from the deadline on (``now >= start_ms + timeout_ms``)."""
        return self.clock() >= self.deadline_ms

    def remaining_s(self) -> float:
        """Seconds left until the deadline, never negative."""
        return max(0.0, (self.deadline_ms - self.clock()) / 1000.0)


@dataclass(frozen=True)
class Barrier:
    """The barrier of one micro-batch: ``batch_id`` (the barrier id), its driver-fixed start
    time ``start_ms`` (``batchTimestampMs``) and the query id.

    ``idle_barriers`` is true when a source of the batch can emit idle barriers (a
    ``format("unaligned")`` source: its offset carries a ``barrierToken``). Only then may a task
    cut: rows it leaves pending are written by a later barrier, and without idle barriers no
    later barrier may ever come (a file source, or Spark's own Kafka source, under
    ``availableNow`` ends after its last batch)."""

    batch_id: int
    start_ms: int
    query_id: str
    idle_barriers: bool = True
    end_of_data: bool = False
    """The final checkpoint: every source of the batch said EndOfData
    (:mod:`unaligned.finishing`)."""
    layout_drain: bool = False
    """A source of the batch drains its task layout before changing it: no task cuts."""

    @property
    def cuts_nothing(self) -> bool:
        """The final checkpoint or a layout drain: every task replays all its pending rows."""
        return self.end_of_data or self.layout_drain

    def deadline(
        self, timeout_ms: int, clock: Clock = wall_clock_ms, *, not_before_ms: int | None = None
    ) -> Deadline:
        """The aligned-checkpoint deadline of this batch: ``start + timeout_ms``, where start is
        ``start_ms``, or ``not_before_ms`` if later (a batch re-run after a restart keeps the
        start time of the run that planned it)."""
        start = self.start_ms if not_before_ms is None else max(self.start_ms, not_before_ms)
        return Deadline(start, timeout_ms, clock)


def end_of_data(source_offsets: list[Any]) -> bool:
    """True when every ``format("unaligned")`` source of a batch (an offset with a
    ``barrierToken``) says ``endOfData``, and there is at least one: the final checkpoint
    (:mod:`unaligned.finishing.final_checkpoint`)."""
    ours = [o for o in source_offsets if isinstance(o, dict) and "barrierToken" in o]
    return bool(ours) and all(o.get(END_OF_DATA_KEY) is True for o in ours)


def layout_drain(source_offsets: list[Any]) -> bool:
    """True when a ``format("unaligned")`` source of a batch drains its task layout."""
    return any(
        isinstance(o, dict) and "barrierToken" in o and o.get(LAYOUT_DRAIN_KEY) is True
        for o in source_offsets
    )


def splits_ranges(source_offsets: list[Any]) -> bool:
    """True when a ``format("unaligned")`` source of a batch splits its ranges into pieces
    (``minPartitions`` / ``maxRecordsPerPartition``): its task count and a partition's task
    change from batch to batch, and per-key order across barriers is not kept anyway."""
    return any(
        isinstance(o, dict) and "barrierToken" in o and o.get(SPLIT_RANGES_KEY) is True
        for o in source_offsets
    )


def reads_nothing(source_offsets: list[Any]) -> bool:
    """True when every source of a batch that has an offset is a ``format("unaligned")``
    source in a layout drain: the batch brings no new row at all (only pending ones)."""
    present = [o for o in source_offsets if o is not None]
    return bool(present) and all(
        isinstance(o, dict) and "barrierToken" in o and o.get(LAYOUT_DRAIN_KEY) is True
        for o in present
    )


def read_barrier(checkpoint: Checkpoint, batch_id: int) -> Barrier:
    """The barrier of ``batch_id``, from Spark's offset log and the query metadata."""
    entry = read_offset_log(checkpoint, batch_id)
    query_id = checkpoint.query_id()
    barrier = Barrier(
        batch_id=batch_id,
        start_ms=entry.batch_timestamp_ms,
        query_id=query_id,
        idle_barriers=bool(tokens_in(source.offset for source in entry.sources)),
        end_of_data=end_of_data([source.offset for source in entry.sources]),
        layout_drain=layout_drain([source.offset for source in entry.sources]),
    )
    logger.debug("read barrier %s", barrier)
    return barrier
