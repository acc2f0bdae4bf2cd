"""Decoded Kafka records -> the source's Arrow batches, in bounded chunks.

The schema is Spark's Kafka source schema
(:func:`unaligned.kafka.records.record_columns.kafka_source_schema`). Records arrive as
:class:`RecordColumns` (one partition, offset order) from the decoder in
:mod:`unaligned.kafka.records.record_decoder`.

Memory: :func:`to_arrow_batches` cuts columns into Arrow batches of at most
:data:`MAX_BATCH_ROWS` rows and about :data:`MAX_BATCH_BYTES` bytes.

Numeric columns wrap the numpy buffers (:func:`unaligned._arrow.numeric_array`) instead of
going through ``pa.array``, which imports pandas in the read task's worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from unaligned._arrow import numeric_array
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records.record_columns import RecordColumns, kafka_arrow_schema

MAX_BATCH_ROWS = 65_536
MAX_BATCH_BYTES = 16 * 1024 * 1024


# --- Arrow output ---------------------------------------------------------------------------


def _constant_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] >= 2**31:
        return pa.array([text] * n, type=pa.string())
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw * n)]
    )


def to_arrow_batches(
    columns: RecordColumns,
    tp: TopicPartitionId,
    include_headers: bool,
    max_rows: int = MAX_BATCH_ROWS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (Spark's exact schema) of at most ``max_rows`` rows and about ``max_bytes``."""
    schema = kafka_arrow_schema(include_headers)
    n = len(columns)
    if n == 0:
        return
    per_row = max(1, columns.nbytes // n)
    step = max(1, min(max_rows, max_bytes // per_row))
    for lo in range(0, n, step):
        part = columns.slice(lo, min(n, lo + step)) if step < n else columns
        rows = len(part)
        arrays = [
            part.keys,
            part.values,
            _constant_string(tp.topic, rows),
            numeric_array(np.full(rows, tp.partition), pa.int32(), np.int32),
            numeric_array(part.offsets, pa.int64(), np.int64),
            numeric_array(part.timestamps_ms * 1000, schema.field("timestamp").type, np.int64),
            numeric_array(part.timestamp_types, pa.int32(), np.int32),
        ]
        if include_headers:
            assert part.headers is not None
            arrays.append(part.headers)
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
