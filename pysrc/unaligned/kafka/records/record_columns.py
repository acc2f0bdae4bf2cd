"""Kafka records of one partition as columns, and the Arrow schema they become.

The row schema is Spark's Kafka source schema (:mod:`unaligned.kafka.records.source_schema`,
re-exported here); :func:`kafka_arrow_schema` is its Arrow form, what ``read()`` yields.

:class:`RecordColumns` is what the fast decoder (:mod:`unaligned.kafka.records.record_decoder`) and
the fallback over kafka-python's ``ConsumerRecord`` (:func:`columns_from_consumer_records`) produce.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from unaligned.kafka.records.source_schema import kafka_source_schema

__all__ = [
    "RecordColumns",
    "columns_from_consumer_records",
    "kafka_arrow_schema",
    "kafka_source_schema",
]


@functools.cache
def kafka_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` (the same conversion Spark applies; built
    once per process)."""
    return to_arrow_schema(kafka_source_schema(include_headers), timezone="UTC")


_HEADERS_TYPE: pa.DataType = kafka_arrow_schema(True).field("headers").type


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
        payload: int = self.keys.nbytes + self.values.nbytes
        return payload + 20 * len(self)

    def slice(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(
            self.offsets[start:stop],
            self.timestamps_ms[start:stop],
            self.timestamp_types[start:stop],
            self.keys.slice(start, stop - start),
            self.values.slice(start, stop - start),
            None if self.headers is None else self.headers.slice(start, stop - start),
        )

    def before(self, end_offset: int) -> RecordColumns:
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
