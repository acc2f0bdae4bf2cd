"""The source's side: a Kafka batch's ``key`` and ``value`` bytes become typed columns.

:meth:`RecordDecoding.resolve` runs when the query starts (the driver's ``DataSource.schema()``)
and fixes the reader schemas; the object is picklable and travels to the read tasks, where
:meth:`RecordDecoding.decode_all` turns each Arrow batch of Spark's Kafka schema into the decoded
schema (:meth:`RecordDecoding.output_schema`): the column becomes the reader schema's type, and
columns are added after Spark's Kafka columns:

- ``valueSchemaId`` (int): the writer's schema id, from the payload prefix or the record's
  ``__value_schema_id`` header (:mod:`unaligned.registry.header_ids`; null: a null value, no
  framing, or a schema named by a GUID the registry gave no id for);
- with several record types in one topic (``valueSubject`` a comma-separated list, or several
  ``valueRecordName`` with the ``record`` / ``topic-record`` naming strategy) ``value`` is a
  struct of one field per type, the record's own type set and the others null;
- with ``mode`` PERMISSIVE, ``valueError`` (string: why the row did not decode, null when it
  did) and ``valueRaw`` (binary: the row's bytes when it did not decode, else null) - the
  dead-letter route: write ``valueRaw`` to another topic in the same transaction.

(``key...`` alike.) A null value (a tombstone) stays null and is no error. With FAILFAST (the
default) the first record that does not decode stops the task with a
:class:`~unaligned.errors.RecordFormatError` naming its topic-partition, offset and reason.
Records are decoded per writer schema id, column-wise, in
:mod:`unaligned.registry.batch_decoding` (numpy and pyarrow): the driver, which only resolves
the schemas and maps them to Spark types, loads neither for Avro.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from unaligned.registry.avro.schema import parse_avro, spark_type
from unaligned.registry.connection.schemas import (
    ColumnReading,
    ResolvedSchema,
    client_for,
    resolve_reader,
    resolve_subject,
    strategy_subject,
    subject_schemas,
)
from unaligned.registry.options import (
    ColumnFormat,
    DecodeMode,
    Format,
    RecordFormats,
    SubjectNameStrategy,
)

if TYPE_CHECKING:
    import pyarrow as pa


def reader_type(column: ColumnFormat, reader: ResolvedSchema) -> DataType:
    """The Spark type of a column read with ``reader`` (Avro: pure Python, no numpy/pyarrow)."""
    fmt = column.format
    if fmt is Format.AVRO:
        return spark_type(parse_avro(reader.schema.text, [s.text for _, s in reader.referenced]))[0]
    if fmt is Format.JSON_SCHEMA:
        from unaligned.registry.json_format import json_spark_type

        return json_spark_type(reader)
    from unaligned.registry.protobuf.protobuf_format import protobuf_spark_type

    return protobuf_spark_type(reader, column)


def column_type(reading: ColumnReading) -> DataType:
    """The decoded column's Spark type: the reader's, or with several record types a struct
    of one field per type (only the record's own type set)."""
    if not reading.branches:
        return reader_type(reading.format, reading.reader)
    return StructType(
        [
            StructField(name, reader_type(branch.format, branch.reader), True)
            for name, branch in reading.branches
        ]
    )


@dataclass(frozen=True)
class RecordDecoding:
    """How a query's ``key``/``value`` are decoded (module docstring). Picklable."""

    formats: RecordFormats
    columns: tuple[ColumnReading, ...]

    @classmethod
    def resolve(cls, formats: RecordFormats, topics: tuple[str, ...] | None) -> RecordDecoding:
        """Ask the registry for the reader schemas (driver, when the query starts)."""
        client = client_for(formats.registry)
        columns = []
        for column in formats.columns:
            if column.subjects:
                branches = []
                for name, entry in column.subjects:
                    subject = strategy_subject(column, entry, topics)
                    branch = column
                    if column.format is Format.PROTOBUF and column.strategy is not (
                        SubjectNameStrategy.TOPIC
                    ):  # the record name is the message's (the file may hold several)
                        branch = replace(column, message_name=entry)
                    reader = resolve_subject(client, branch, subject)
                    known = subject_schemas(client, reader, column.format)
                    branches.append((name, ColumnReading(branch, reader, known)))
                first = branches[0][1]
                columns.append(ColumnReading(column, first.reader, (), tuple(branches)))
                continue
            reader = resolve_reader(client, column, topics)
            known = subject_schemas(client, reader, column.format)
            columns.append(ColumnReading(column, reader, known))
        return cls(formats, tuple(columns))

    # --- schema -------------------------------------------------------------------------------

    def output_schema(self, base: StructType) -> StructType:
        """``base`` (Spark's Kafka schema) with the decoded columns' types and the added
        columns (module docstring)."""
        fields = list(base.fields)
        for reading in self.columns:
            at = [f.name for f in fields].index(reading.name)
            fields[at] = StructField(reading.name, column_type(reading), True)
        for reading in self.columns:
            fields.append(StructField(f"{reading.name}SchemaId", IntegerType(), True))
            if self.formats.mode is DecodeMode.PERMISSIVE:
                fields.append(StructField(f"{reading.name}Error", StringType(), True))
                fields.append(StructField(f"{reading.name}Raw", BinaryType(), True))
        return StructType(fields)

    # --- read tasks ---------------------------------------------------------------------------

    def decode_all(
        self, batches: Iterable[pa.RecordBatch], base: StructType, keep_headers: bool = True
    ) -> Iterator[pa.RecordBatch]:
        """Every batch of Spark's Kafka schema ``base`` decoded (what a read task yields); a
        ``headers`` column read only for the schema id headers is dropped unless
        ``keep_headers``."""
        from unaligned.registry.batch_decoding import decode_batches

        if not keep_headers:
            base = StructType([f for f in base.fields if f.name != "headers"])
        output = self.output_schema(base)
        return decode_batches(self.formats, self.columns, batches, output)
