"""``maxBytesPerTrigger`` (Spark's ``ReadMaxBytes`` read limit): batches capped by record bytes.

Kafka offsets say nothing of sizes, and a backlog of large records after small ones is what
runs executors out of memory, so an estimate from earlier batches would miss exactly the case
the cap is for. The driver therefore measures the records it is about to plan: for each
partition with backlog it reads the batch's candidate range from its start (the read tasks'
own path, :func:`unaligned.source.partition_reader.read_partition`, in the source runner) and
ends the range at the record whose key and value bytes reach the partition's share of the cap
(the cap over the partitions with backlog), that record included. A batch therefore holds at
most ``maxBytesPerTrigger`` plus one record per partition, and every partition with backlog
moves by at least one record.

What it costs: the driver reads each batch's records twice (once here, up to the share and
one fetch past it per partition, and once in the read tasks); it decodes them in the source
runner and keeps at most one fetch round of them at a time. Applied after ``maxOffsetsPerTrigger``
and ``targetBatchDuration`` (which only shrink the ranges it reads), and like them only when
the engine lets the source choose the batch size (not under ``Trigger.Once``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from unaligned._util.arrow import integers
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition, read_partition
from unaligned.source.planning.offset_ranges import OffsetRange

logger = logging.getLogger(__name__)

Reader = Callable[[KafkaInputPartition], Iterator[pa.RecordBatch]]


def byte_limit(
    options: SourceOptions,
    froms: Mapping[TopicPartitionId, int],
    ends: Mapping[TopicPartitionId, int],
    max_bytes: int,
    read: Reader = read_partition,
) -> dict[TopicPartitionId, int]:
    """The ends of ``[froms, ends)`` cut so that each partition with backlog holds its share
    of ``max_bytes`` (key and value bytes) plus at most one record."""
    backlog = [tp for tp in sorted(ends) if ends[tp] > froms[tp]]
    result = dict(ends)
    if not backlog:
        return result
    share = max(1, max_bytes // len(backlog))
    for tp in backlog:
        result[tp] = _end_within(options, OffsetRange(tp, froms[tp], ends[tp]), share, read)
    if result != dict(ends):
        logger.info(
            "maxBytesPerTrigger %d: %d of %d offsets planned (%d bytes a partition)",
            max_bytes,
            sum(result[tp] - froms[tp] for tp in backlog),
            sum(ends[tp] - froms[tp] for tp in backlog),
            share,
        )
    return result


def _end_within(options: SourceOptions, rng: OffsetRange, share: int, read: Reader) -> int:
    """The end of ``rng`` after the record whose bytes reach ``share`` (``rng.end`` if they
    never do)."""
    part = KafkaInputPartition(
        index=0,
        ranges=(rng,),
        kafka=options.kafka,
        include_headers=False,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )
    total = 0
    batches = read(part)
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            running = total + np.cumsum(record_bytes(batch))
            reached = int(np.searchsorted(running, share, side="left"))
            if reached < len(running):
                return int(integers(batch.column("offset"))[reached]) + 1
            total = int(running[-1])
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return rng.end


def record_bytes(batch: pa.RecordBatch) -> np.ndarray:
    """Key and value bytes of each record of a source batch (a null counts 0)."""
    sizes: np.ndarray = _lengths(batch.column("key")) + _lengths(batch.column("value"))
    return sizes


def _lengths(column: pa.Array) -> np.ndarray:
    """Byte length of each value of a binary column, from its offsets buffer (no compute call:
    pyarrow would import pandas in the source runner)."""
    if len(column) == 0:
        return np.zeros(0, dtype=np.int64)
    kind = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    buffer = column.buffers()[1]
    if buffer is None:
        return np.zeros(len(column), dtype=np.int64)
    offsets = np.frombuffer(buffer, dtype=kind)
    window = offsets[column.offset : column.offset + len(column) + 1]
    lengths: np.ndarray = np.diff(window).astype(np.int64)
    return lengths
