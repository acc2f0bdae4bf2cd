"""Offset ranges of a micro-batch and the read limits that bound them.

Every range is ``[start, end)`` of one topic-partition with an **exclusive** end, in *next
offset to read* positions (see :mod:`unaligned.source.offsets`): ``[7, 7)`` has nothing to read.
:func:`group_ranges` turns a batch's ranges into read tasks: ``readTasks`` tasks, each with
several topic-partitions (round robin in (topic, partition) order, so a topic-partition stays on
its task index while the partitions and the count stay the same), or, with ``minPartitions`` /
``maxRecordsPerPartition``, one task per piece of :func:`split_ranges`; :func:`rate_limit` and
friends implement Spark's ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger`` and ``maxTriggerDelay``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unaligned.kafka.partitions import TopicPartitionId

# --- ranges ---------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition (``end`` exclusive, ``start <= end``)."""

    tp: TopicPartitionId
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range [{self.start}, {self.end}) for {self.tp}")

    @property
    def size(self) -> int:
        """Offsets covered; records may be fewer (compaction, transaction markers)."""
        return self.end - self.start


def _pieces_per_range(sizes: Sequence[int], min_partitions: int) -> list[int]:
    """Largest-remainder split of ``min_partitions`` pieces over ranges proportionally to size;
    every range gets at least one piece and never more pieces than offsets."""
    total = sum(sizes)
    count = len(sizes)
    if total == 0 or min_partitions <= count:
        return [1] * count
    extra = min_partitions - count
    shares = [extra * size / total for size in sizes]
    pieces = [
        1 + min(int(math.floor(s)), max(size - 1, 0)) for s, size in zip(shares, sizes, strict=True)
    ]
    leftover = min_partitions - sum(pieces)
    order = sorted(range(count), key=lambda i: (-(shares[i] - math.floor(shares[i])), i))
    while leftover > 0:
        progressed = False
        for i in order:
            if leftover == 0:
                break
            if pieces[i] < sizes[i]:
                pieces[i] += 1
                leftover -= 1
                progressed = True
        if not progressed:
            break
    return pieces


def split_ranges(
    ranges: Sequence[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The read tasks for ``ranges``, in a stable order (topic, partition, start).

    Without splitting options: one task per topic-partition, empty ranges included. With
    ``min_partitions`` larger than the number of ranges, large ranges are cut into pieces
    proportionally to their size (so there are exactly ``min_partitions`` tasks when the ranges
    hold enough offsets). With ``max_records_per_partition`` no piece covers more offsets than
    that. Splitting changes which task reads which offsets: a task index then no longer maps to
    one Kafka partition.
    """
    ordered = sorted(ranges)
    pieces = [1] * len(ordered)
    if min_partitions is not None:
        pieces = _pieces_per_range([r.size for r in ordered], min_partitions)
    if max_records_per_partition is not None:
        pieces = [
            max(p, -(-r.size // max_records_per_partition))
            for p, r in zip(pieces, ordered, strict=True)
        ]
    out: list[OffsetRange] = []
    for rng, count in zip(ordered, pieces, strict=True):
        start = rng.start
        remaining = rng.size
        for i in range(count):
            length = remaining // (count - i)
            out.append(OffsetRange(rng.tp, start, start + length))
            start += length
            remaining -= length
    return out


def group_ranges(
    ranges: Sequence[OffsetRange],
    read_tasks: int | None,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[tuple[OffsetRange, ...]]:
    """The ranges of each read task, in task order.

    With ``min_partitions`` or ``max_records_per_partition``: one task per piece of
    :func:`split_ranges` (Spark's splitting; a partition's offsets may then move between task
    indexes). Otherwise ``min(read_tasks, len(ranges))`` tasks (``None``: one per range), range
    ``i`` of the (topic, partition) order on task ``i % tasks``, empty ranges included: a
    topic-partition keeps its task index from batch to batch.
    """
    if min_partitions is not None or max_records_per_partition is not None or read_tasks is None:
        return [
            (piece,) for piece in split_ranges(ranges, min_partitions, max_records_per_partition)
        ]
    ordered = sorted(ranges)
    count = max(1, min(read_tasks, len(ordered)))
    return [tuple(ordered[i::count]) for i in range(count)] if ordered else []


# --- read limits ----------------------------------------------------------------------------


def available_records(
    start: Mapping[TopicPartitionId, int], latest: Mapping[TopicPartitionId, int]
) -> int:
    """Offsets between ``start`` and ``latest`` over the partitions of ``latest``."""
    return sum(max(0, end - start.get(tp, end)) for tp, end in latest.items())


def rate_limit(
    start: Mapping[TopicPartitionId, int],
    latest: Mapping[TopicPartitionId, int],
    max_records: int,
) -> dict[TopicPartitionId, int]:
    """End positions covering at most ``max_records`` offsets in total.

    Spark's ``maxOffsetsPerTrigger``: the budget is shared across partitions in proportion to
    their backlog (largest remainder, ties to the lower topic-partition), so the sum of the
    ranges never exceeds ``max_records`` and every batch makes progress. ``start`` must hold
    every partition of ``latest``.
    """
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    backlog = {tp: max(0, end - start[tp]) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    shares = {tp: max_records * size / total for tp, size in backlog.items()}
    grant = {tp: int(math.floor(share)) for tp, share in shares.items()}
    leftover = max_records - sum(grant.values())
    for tp in sorted(shares, key=lambda t: (-(shares[t] - grant[t]), t)):
        if leftover == 0:
            break
        if grant[tp] < backlog[tp]:
            grant[tp] += 1
            leftover -= 1
    # A partition without backlog keeps its latest position, even one below its start (a
    # recreated topic): the planner reports that as data loss.
    return {tp: start[tp] + grant[tp] if backlog[tp] else end for tp, end in latest.items()}


def min_rows_delay_passed(now_ms: int, last_trigger_ms: int, max_trigger_delay_ms: int) -> bool:
    """Spark's ``maxTriggerDelay``: a batch is due once this long has passed since the last one."""
    return now_ms - last_trigger_ms >= max_trigger_delay_ms
