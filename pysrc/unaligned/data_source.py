"""The ``format("unaligned")`` entry point that Spark instantiates.

One class serves three roles, chosen by what Spark asks for:

- ``spark.readStream.format("unaligned")``: the Kafka source
  (:mod:`unaligned.source.stream_reader`).
- ``df.writeStream.format("unaligned")``: the two-phase-commit sink
  (:mod:`unaligned.sink.two_phase_commit`), to Kafka or to Parquet files.
- ``spark.read.format("unaligned").option("path", ...)``: a batch read of the files the file
  sink committed (:mod:`unaligned.sink.files.committed_files`); uncommitted files are never visible.
- ``spark.read.format("unaligned")`` with a Kafka subscription: a batch read of
  ``[startingOffsets, endingOffsets)``, as Spark's ``format("kafka")``
  (:mod:`unaligned.source.batch_reader`).

The class itself is only a dispatcher: options are parsed and validated by the role's module,
and nothing touches Kafka or a filesystem until Spark calls a reader or writer method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from unaligned.registry.record_decoding import RecordDecoding
    from unaligned.source.options import SourceOptions


FORMAT_NAME = "unaligned"
_SUBSCRIPTION_KEYS = frozenset({"subscribe", "subscribepattern", "assign"})


class UnalignedDataSource(DataSource):
    """Kafka source, exactly-once sink, and committed-files reader under one format name."""

    _record_decoding: RecordDecoding | None = None
    """Set by the first ``schema()`` or reader that needs it; pickled with the data source."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _reads_files(self) -> bool:
        """A batch read names a ``path`` and no Kafka subscription."""
        keys = {k.lower() for k in self.options}
        return "path" in keys and not keys & _SUBSCRIPTION_KEYS

    def schema(self) -> StructType:
        if self._reads_files():
            from unaligned.sink.files.committed_files import committed_files_schema

            return committed_files_schema(dict(self.options))
        from unaligned.kafka.records.source_schema import kafka_source_schema
        from unaligned.source.options import SourceOptions

        options = SourceOptions.parse(dict(self.options))
        base = kafka_source_schema(options.include_headers)
        decoding = self._decoding(options)
        return base if decoding is None else decoding.output_schema(base)

    def _decoding(self, options: SourceOptions) -> RecordDecoding | None:
        """The Schema Registry reader schemas, resolved once when the query starts: in
        ``schema()``, whose data source Spark pickles to every later process (or, with a
        user-given schema, in the first reader built)."""
        if options.formats is None:
            return None
        if self._record_decoding is None:
            from unaligned.registry.record_decoding import RecordDecoding

            self._record_decoding = RecordDecoding.resolve(options.formats, options.topics)
        return self._record_decoding

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from unaligned.source.options import SourceOptions
        from unaligned.source.stream_reader import KafkaStreamReader

        options = SourceOptions.parse(dict(self.options))
        return KafkaStreamReader(options, decoding=self._decoding(options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from unaligned.sink.stream_writer_factory import build_stream_writer
        from unaligned.tuning.worker_memory import tune_worker_memory

        writer = build_stream_writer(dict(self.options), schema)
        # The planner and the commit runner are reused daemon workers too (after the build,
        # so that what it imported and the Kafka clients it keeps are frozen with the rest).
        tune_worker_memory()
        return writer

    def reader(self, schema: StructType) -> DataSourceReader:
        if not {k.lower() for k in self.options} & _SUBSCRIPTION_KEYS:
            from unaligned.sink.files.committed_files import CommittedFilesReader

            return CommittedFilesReader(dict(self.options), schema)
        from unaligned.source.batch_reader import KafkaBatchReader
        from unaligned.source.options import SourceOptions

        options = SourceOptions.parse(dict(self.options), batch=True)
        return KafkaBatchReader(options, self._decoding(options))


def register(spark: SparkSession) -> None:
    """Register ``format("unaligned")`` on ``spark`` explicitly.

    Not needed when the package is installed (Spark finds :mod:`pyspark_unaligned` by itself);
    useful when the package is only on ``sys.path`` of the driver and the workers.
    """
    spark.dataSource.register(UnalignedDataSource)
