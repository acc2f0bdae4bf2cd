"""``spark.read.format("unaligned")`` with Kafka options: a batch read, as Spark's
``spark.read.format("kafka")``.

It reads ``[startingOffsets, endingOffsets)`` of every partition the subscription covers
(defaults ``earliest`` and ``latest``; timestamps too), with the same columns, ``read_committed``
and ``failOnDataLoss`` as the stream. The driver resolves both ends and plans the ranges with the
stream's driver code (:class:`~unaligned.source.planning.batch_planning.BatchPlanning`: the same
resolution, data-loss checks and task splitting); each task runs the executor-side
:func:`~unaligned.source.partition_reader.read_partition` (and decodes Schema Registry formats
as the stream does).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition, read_partition
from unaligned.source.planning.batch_planning import BatchPlanning

if TYPE_CHECKING:
    from unaligned.registry.record_decoding import RecordDecoding


class KafkaBatchReader(DataSourceReader):
    """Plans (driver) and reads (executors) one bounded range per topic-partition."""

    def __init__(self, options: SourceOptions, decoding: RecordDecoding | None = None) -> None:
        assert options.ending is not None, "a batch read needs an end (parse with batch=True)"
        self._options = options
        self._decoding = decoding

    def partitions(self) -> list[KafkaInputPartition]:
        planner = BatchPlanning(self._options)
        try:
            positions, ending = planner.resolve_range()
            assert ending is not None
            start = KafkaSourceOffset(positions)
            end = KafkaSourceOffset({tp: ending[tp] for tp in positions if tp in ending})
            return planner.plan(start, end, planner.read_tasks())
        finally:
            planner.stop()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        if self._decoding is None:
            return read_partition(partition)
        from unaligned.kafka.records.source_schema import kafka_source_schema

        base = kafka_source_schema(partition.reads_headers)
        batches = read_partition(partition)
        return self._decoding.decode_all(batches, base, keep_headers=partition.include_headers)
