"""The floor of any Python Data Source sink: ``format("bench-floor")`` reads its input and writes
nothing.

Spark hands a Python sink its rows through Arrow (the JVM converts its rows to Arrow batches, a
Python worker per task reads them) whatever the sink does with them. This sink does only that,
so its records/s is the most any Python sink can reach with the same source on the same machine,
and its CPU is what the hand-over costs: the Kafka sink benchmark
(:mod:`benchmarks.bench_kafka_sink`) runs it beside Spark's own sink and ours, and reports our
sink's own cost as ours minus the floor.

:func:`register` registers it with a session; the classes are pickled by value, so the Python
workers need not find this module on their path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

FORMAT = "bench-floor"


class FloorWriter(DataSourceStreamArrowWriter):
    """Counts the rows of every Arrow batch it is given; commits and aborts nothing. Its
    worker tunes its memory as our sink's does (:mod:`unaligned.tuning.worker_memory`), so that ours
    minus the floor stays our sink's own work."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from unaligned.tuning.worker_memory import tune_worker_memory

        tune_worker_memory()
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to abort."""


class FloorSink(DataSource):
    """``format("bench-floor")``: a stream sink that writes nothing (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> FloorWriter:
        return FloorWriter()


def register(spark: Any) -> None:
    """Register :class:`FloorSink` with ``spark``, pickled by value for the Python workers."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSink)
