"""``spark.readStream.format("unaligned")``: the Kafka stream reader (a drop-in for Spark's).

The object Spark builds with ``streamReader()`` in three kinds of process, each loading only
what it uses:

- the source runner (driver, one per query run): the first call that needs the broker builds
  :class:`~unaligned.source.planning.batch_planning.BatchPlanning` (offsets, read limits, the
  batch's read tasks), which answers every call after it;
- the read planner (driver, Spark's ``plan_data_source_read``): it builds this reader and
  pickles it into the read tasks, and calls nothing on it; so it never imports kafka-python or
  the planning modules, and the pickle carries the options alone;
- executor read tasks: :meth:`KafkaStreamReader.read` runs on a fresh, unpickled reader per task
  (:mod:`unaligned.source.partition_reader`).

Call order, data loss, restarts and bounded input: ARCHITECTURE.md, "Module notes",
``source/stream_reader.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from unaligned.source.options import SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from unaligned.registry.record_decoding import RecordDecoding
    from unaligned.source.partition_reader import KafkaInputPartition
    from unaligned.source.planning.batch_planning import BatchPlanning


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One per query run on the driver, one per task on executors (module docstring).
    ``planning`` gives the driver side ready-made (tests pass one over a fake broker);
    ``decoding``: the Schema Registry formats resolved when the query started."""

    def __init__(
        self,
        options: SourceOptions,
        planning: BatchPlanning | None = None,
        decoding: RecordDecoding | None = None,
    ) -> None:
        self._options = options
        self._planning = planning
        self._decoding = decoding

    @property
    def planning(self) -> BatchPlanning:
        """The driver side of this query run, built on first use (module docstring)."""
        if self._planning is None:
            from unaligned.source.planning.batch_planning import BatchPlanning

            self._planning = BatchPlanning(self._options)
        return self._planning

    # --- driver: Spark's source runner ------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return self.planning.initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.planning.default_read_limit()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self.planning.latest_offset(start, limit)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self.planning.report_latest_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        self.planning.prepare_for_trigger_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaInputPartition]:
        return self.planning.partitions(start, end)

    def commit(self, end: dict[str, Any]) -> None:
        self.planning.commit(end)

    def stop(self) -> None:
        if self._planning is not None:
            self._planning.stop()

    # --- executors: one read task ---------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from unaligned.source.partition_reader import KafkaInputPartition, read_partition

        assert isinstance(partition, KafkaInputPartition)
        if self._decoding is None:
            return read_partition(partition)
        from unaligned.kafka.records.source_schema import kafka_source_schema

        base = kafka_source_schema(partition.reads_headers)
        batches = read_partition(partition)
        return self._decoding.decode_all(batches, base, keep_headers=partition.include_headers)
