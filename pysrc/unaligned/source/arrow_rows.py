"""Decoded Kafka records -> the source's Arrow batches, in bounded chunks.

The schema is Spark's Kafka source schema
(:func:`unaligned.kafka.records.record_columns.kafka_source_schema`). Records arrive as
:class:`RecordColumns` from the decoder in :mod:`unaligned.kafka.records.record_decoder`: one or
many partitions, partition after partition, each in offset order, with the rows of each
(``partitions``), which become the ``topic`` and ``partition`` columns.

Memory: :func:`to_arrow_batches` cuts columns into Arrow batches of at most
:data:`MAX_BATCH_ROWS` rows and about :data:`MAX_BATCH_BYTES` bytes.

Numeric columns wrap the numpy buffers (:func:`unaligned._util.arrow.numeric_array`) instead of
going through ``pa.array``, which imports pandas in the read task's worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from unaligned._util.arrow import numeric_array
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records.record_columns import RecordColumns, kafka_arrow_schema

MAX_BATCH_ROWS = 65_536
MAX_BATCH_BYTES = 16 * 1024 * 1024

PartitionRows = Sequence[tuple[TopicPartitionId, int]]
"""Which partition each stretch of rows belongs to: ``(topic-partition, rows)`` in row order."""


# --- Arrow output ---------------------------------------------------------------------------


def _topic_column(pieces: PartitionRows) -> pa.Array:
    """The ``topic`` column of the rows of ``pieces``: each row its partition's topic name."""
    names = [tp.topic.encode("utf-8") for tp, _ in pieces]
    counts = np.array([rows for _, rows in pieces], np.int64)
    sizes = np.repeat(np.array([len(name) for name in names], np.int64), counts)
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = b"".join(name * rows for name, (_, rows) in zip(names, pieces, strict=True))
    if offsets[-1] >= 2**31:
        raise ValueError("more than 2 GiB of topic names in one Arrow batch")
    return pa.Array.from_buffers(
        pa.string(), len(sizes), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def _slice_pieces(pieces: PartitionRows, lo: int, hi: int) -> list[tuple[TopicPartitionId, int]]:
    """The part of ``pieces`` that covers rows ``[lo, hi)``."""
    out = []
    start = 0
    for tp, rows in pieces:
        first, stop = max(lo, start), min(hi, start + rows)
        if first < stop:
            out.append((tp, stop - first))
        start += rows
        if start >= hi:
            break
    return out


def to_arrow_batches(
    columns: RecordColumns,
    partitions: PartitionRows,
    include_headers: bool,
    max_rows: int = MAX_BATCH_ROWS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (Spark's exact schema) of at most ``max_rows`` rows and about
    ``max_bytes``, over the records of one or more partitions: ``partitions`` says whose the
    rows are, in order (their rows add up to the columns')."""
    schema = kafka_arrow_schema(include_headers)
    n = len(columns)
    if n == 0:
        return
    covered = sum(rows for _, rows in partitions)
    if covered != n:
        raise ValueError(f"the partitions cover {covered} rows of {n}")
    partition_ids = np.repeat(
        np.array([tp.partition for tp, _ in partitions], np.int32),
        np.array([rows for _, rows in partitions], np.int64),
    )
    per_row = max(1, columns.nbytes // n)
    step = max(1, min(max_rows, max_bytes // per_row))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        part = columns.slice(lo, hi) if step < n else columns
        arrays = [
            part.keys,
            part.values,
            _topic_column(_slice_pieces(partitions, lo, hi) if step < n else partitions),
            numeric_array(partition_ids[lo:hi], pa.int32(), np.int32),
            numeric_array(part.offsets, pa.int64(), np.int64),
            numeric_array(part.timestamps_ms * 1000, schema.field("timestamp").type, np.int64),
            numeric_array(part.timestamp_types, pa.int32(), np.int32),
        ]
        if include_headers:
            assert part.headers is not None
            arrays.append(part.headers)
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
