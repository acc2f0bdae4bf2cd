"""Task layouts and the layout drain: a batch's topic-partitions dealt to its read tasks, and the
batch the source plans before the layout changes.

Without a shuffle before the sink, sink task ``i`` writes what read task ``i`` read, and the
rows a cut leaves pending at task ``i`` are replayed by task ``i`` of the next batch, before its
new rows. Per-key order holds while every topic-partition stays on its task index. A restart
with another ``readTasks``, partitions added to a topic, or another subscription deals the
partitions anew (:func:`unaligned.source.planning.offset_ranges.group_ranges`): a partition's
pending rows would then be replayed by one task while another writes its new rows.

So before the first batch at a new layout the source plans a **layout drain**
(:func:`drain_offset`): the previous batch's positions again (empty ranges, nothing new read),
at the previous batch's task count, marked ``layoutDrain`` in the offset. The sink cuts nothing
in it (every task replays all its pending rows, as in the final checkpoint), so nothing is
pending when the new layout applies, from the next batch. With nothing pending it is an empty
batch (its cost: ``docs/guides/rescaling.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.options import SourceOptions
from unaligned.source.planning.offset_ranges import OffsetRange


def task_layout(
    partitions: Iterable[TopicPartitionId], read_tasks: int | None
) -> dict[TopicPartitionId, int]:
    """Where :func:`~unaligned.source.planning.offset_ranges.group_ranges` puts each partition: the
    ``i``-th of the (topic, partition) order on task ``i % tasks``, ``tasks`` being
    ``min(read_tasks, partitions)`` (``None``: one task per partition)."""
    ordered = sorted(set(partitions))
    count = len(ordered) if read_tasks is None else max(1, min(read_tasks, len(ordered)))
    return {tp: i % count for i, tp in enumerate(ordered)} if ordered else {}


def layout_changes(
    options: SourceOptions,
    begin: KafkaSourceOffset,
    partitions: Iterable[TopicPartitionId],
    read_tasks: int | None,
) -> bool:
    """Whether a batch from ``begin`` over ``partitions`` with ``read_tasks`` tasks deals the
    partitions otherwise than the batch that ended at ``begin``. Never after a layout drain,
    a final checkpoint or at the query's start (nothing can be pending there), nor with
    ``minPartitions`` / ``maxRecordsPerPartition`` (tasks by pieces: no stable layout)."""
    if splits_ranges(options):
        return False
    if begin.layout_drain or begin.end_of_data() or begin.is_query_start():
        return False
    return task_layout(begin.positions, begin.read_tasks) != task_layout(partitions, read_tasks)


def splits_ranges(options: SourceOptions) -> bool:
    """``minPartitions`` / ``maxRecordsPerPartition``: one task per piece of a range, so the
    task count and a partition's task change with the batch (recorded as ``splitRanges`` in the
    offsets: the sink then moves pending state as it must, :mod:`unaligned.sink.pending_layout`)."""
    return options.min_partitions is not None or options.max_records_per_partition is not None


def drain_offset(begin: KafkaSourceOffset) -> KafkaSourceOffset:
    """The end offset of the layout drain after ``begin``: its positions (nothing read), its
    task count and topic ids, ``layoutDrain``; the idle-barrier counter moves so that Spark
    plans it."""
    return replace(begin.next(begin.positions, begin.idle_barrier + 1), layout_drain=True)


def drain_ranges(finish: KafkaSourceOffset) -> list[OffsetRange]:
    """A layout drain's ranges: one empty range per partition of its offset, asked of no
    broker (nothing is read; the next batch makes the data-loss checks, from the same
    positions and topic ids)."""
    return [OffsetRange(tp, pos, pos) for tp, pos in sorted(finish.positions.items())]


def describe_change(
    begin: KafkaSourceOffset, partitions: Iterable[TopicPartitionId], read_tasks: int | None
) -> str:
    """One line for the log: how the layout changes."""
    old = task_layout(begin.positions, begin.read_tasks)
    new = task_layout(partitions, read_tasks)
    moved = sorted(tp for tp in old if tp in new and old[tp] != new[tp])
    added = sorted(tp for tp in new if tp not in old)
    gone = sorted(tp for tp in old if tp not in new)
    parts = [f"{len(set(old.values()))} -> {len(set(new.values()))} read tasks"]
    if moved:
        parts.append(f"{len(moved)} partition(s) move to another task")
    if added:
        parts.append(f"{len(added)} partition(s) added")
    if gone:
        parts.append(f"{len(gone)} partition(s) gone")
    return ", ".join(parts)
