"""The floor of any Python Data Source source: ``format("bench-floor-source")`` yields rows of
Spark's Kafka schema and reads nothing.

Spark takes a Python source's rows through Arrow (a Python worker per read task yields Arrow
batches, the JVM turns their columns into rows) whatever the source does to make them. This
source only slices pre-built batches of the Kafka schema (100-byte values, as the benchmark's
input), with the same offsets per partition, ``maxOffsetsPerTrigger`` and read tasks per batch as
ours, so its records/s is the most any Python source reaches on the same machine, and ours over
the floor is what reading Kafka costs us. Workload 1 of ``python -m benchmarks compare`` runs it
beside ours on the no-op output (:mod:`benchmarks.compare.throughput`).

Options: ``records`` (total), ``partitions``, ``maxOffsetsPerTrigger``, ``readTasks`` (default
the cores of this host, as ours). :func:`register` registers it with a session; the classes are
pickled by value, so the Python workers need not find this module on their path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

FORMAT = "bench-floor-source"
VALUE_BYTES = 100
ROWS_PER_BATCH = 32_768


@dataclass(frozen=True)
class FloorTask(InputPartition):
    """Rows ``[start, end)`` of each listed partition."""

    ranges: tuple[tuple[int, int, int], ...]  # (partition, start, exclusive end)


def _batch(rows: int) -> pa.RecordBatch:
    """``rows`` rows of the Kafka schema: null keys, 100-byte values, partition 0, offsets from
    0 (built with numpy: no Python object per row)."""
    import numpy as np

    from unaligned.kafka.records.record_columns import kafka_arrow_schema

    schema = kafka_arrow_schema(False)
    offsets = pa.py_buffer(np.arange(rows + 1, dtype=np.int32) * VALUE_BYTES)
    values = pa.Array.from_buffers(
        pa.binary(), rows, [None, offsets, pa.py_buffer(b"v" * (VALUE_BYTES * rows))]
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(rows, pa.binary()),
            values,
            pa.array(["floor"] * rows, pa.string()),
            pa.array(np.zeros(rows, np.int32)),
            pa.array(np.arange(rows, dtype=np.int64)),
            pa.array(np.zeros(rows, np.int64)).cast(schema.field("timestamp").type),
            pa.array(np.zeros(rows, np.int32)),
        ],
        schema=schema,
    )


class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, given: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in given.items()}  # Spark lower-cases option keys
        self.records = int(options["records"])
        self.partitions_n = int(options.get("partitions", "8"))
        self.max_rows = int(options.get("maxoffsetspertrigger", str(self.records)))
        self.read_tasks = int(options.get("readtasks", str(os.cpu_count() or 1)))
        per = self.records // self.partitions_n
        self.ends = [
            per + (1 if p < self.records % self.partitions_n else 0)
            for p in range(self.partitions_n)
        ]

    def initialOffset(self) -> dict[str, Any]:
        return {"offsets": [0] * self.partitions_n}

    def prepareForTriggerAvailableNow(self) -> None:
        """The input is fixed: nothing to freeze."""

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = list(start["offsets"])
        backlog = [end - b for end, b in zip(self.ends, begin, strict=True)]
        total = sum(backlog)
        if total == 0:
            return start
        budget = min(total, self.max_rows)
        grant = [size * budget // total for size in backlog]
        grant[backlog.index(max(backlog))] += budget - sum(grant)
        return {"offsets": [b + g for b, g in zip(begin, grant, strict=True)]}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[FloorTask]:
        ranges = [
            (p, s, e) for p, (s, e) in enumerate(zip(start["offsets"], end["offsets"], strict=True))
        ]
        count = max(1, min(self.read_tasks, len(ranges)))
        return [FloorTask(tuple(ranges[i::count])) for i in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FloorTask)
        template = _batch(ROWS_PER_BATCH)
        for _, start, end in partition.ranges:
            for lo in range(start, end, ROWS_PER_BATCH):
                rows = min(ROWS_PER_BATCH, end - lo)
                yield template.slice(0, rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to commit."""


class FloorSource(DataSource):
    """``format("bench-floor-source")`` (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        from unaligned.kafka.records.record_columns import kafka_source_schema

        return kafka_source_schema(False)

    def streamReader(self, schema: StructType) -> FloorReader:
        return FloorReader(dict(self.options))


def register(spark: Any) -> None:
    """Register :class:`FloorSource` with ``spark``, pickled by value for the Python workers."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSource)
