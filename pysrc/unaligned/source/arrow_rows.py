"""The source's schema, and Kafka records -> ``pyarrow.RecordBatch`` in bounded chunks.

Schema (exactly Spark's Kafka source schema; every field nullable, as Spark declares them)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key string, value binary>>]

``headers`` is null for a record without headers (as in Spark). ``timestampType`` is Kafka's
id: 0 CreateTime, 1 LogAppendTime.

Records arrive as :class:`RecordColumns` (one partition, offset order): from the fast decoder in
:mod:`unaligned.kafka.record_decoder` (plugged into kafka-python's fetcher by
:mod:`unaligned.kafka.columnar_fetch`), or from kafka-python's ``ConsumerRecord``s through
:func:`columns_from_consumer_records` when that hook cannot be installed.

Memory: :func:`to_record_batches` cuts columns into Arrow batches of at most
:data:`MAX_BATCH_ROWS` rows and about :data:`MAX_BATCH_BYTES` bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from unaligned.source.offsets import TopicPartition

logger = logging.getLogger(__name__)

MAX_BATCH_ROWS = 65_536
MAX_BATCH_BYTES = 16 * 1024 * 1024


def kafka_source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (all fields nullable, as Spark's)."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        header = StructType(
            [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
        )
        fields.append(StructField("headers", ArrayType(header, True), True))
    return StructType(fields)


def kafka_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` (the same conversion Spark applies)."""
    return to_arrow_schema(kafka_source_schema(include_headers), timezone="UTC")


_HEADERS_TYPE: pa.DataType = kafka_arrow_schema(True).field("headers").type


# --- decoded columns ------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordColumns:
    """Records of one partition, in offset order, as columns (``headers`` only when asked)."""

    offsets: np.ndarray  # int64
    timestamps_ms: np.ndarray  # int64
    timestamp_types: np.ndarray  # int32
    keys: pa.Array  # binary
    values: pa.Array  # binary
    headers: pa.Array | None  # list<struct<key string, value binary>>

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + 20 * len(self)

    def slice(self, start: int, stop: int) -> "RecordColumns":
        return RecordColumns(
            self.offsets[start:stop],
            self.timestamps_ms[start:stop],
            self.timestamp_types[start:stop],
            self.keys.slice(start, stop - start),
            self.values.slice(start, stop - start),
            None if self.headers is None else self.headers.slice(start, stop - start),
        )

    def before(self, end_offset: int) -> "RecordColumns":
        """The records with ``offset < end_offset`` (offsets are increasing)."""
        cut = int(np.searchsorted(self.offsets, end_offset, side="left"))
        return self if cut == len(self) else self.slice(0, cut)


def columns_from_consumer_records(records: Sequence[Any], include_headers: bool) -> RecordColumns:
    """kafka-python ``ConsumerRecord``s -> columns (the path without the fetcher hook)."""
    headers = None
    if include_headers:
        headers = pa.array(
            [list(r.headers) if r.headers else None for r in records], type=_HEADERS_TYPE
        )
    return RecordColumns(
        offsets=np.fromiter((r.offset for r in records), np.int64, len(records)),
        timestamps_ms=np.fromiter((r.timestamp for r in records), np.int64, len(records)),
        timestamp_types=np.fromiter((r.timestamp_type for r in records), np.int32, len(records)),
        keys=pa.array([r.key for r in records], type=pa.binary()),
        values=pa.array([r.value for r in records], type=pa.binary()),
        headers=headers,
    )


# --- Arrow output ---------------------------------------------------------------------------


def _constant_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] >= 2**31:
        return pa.array([text] * n, type=pa.string())
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw * n)]
    )


def to_record_batches(
    columns: RecordColumns,
    tp: TopicPartition,
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
            pa.array(np.full(rows, tp.partition, np.int32)),
            pa.array(part.offsets),
            pa.array(part.timestamps_ms * 1000).view(schema.field("timestamp").type),
            pa.array(part.timestamp_types),
        ]
        if include_headers:
            assert part.headers is not None
            arrays.append(part.headers)
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
