"""The source's side: a Kafka batch's ``key`` and ``value`` bytes become typed columns.

:meth:`RecordDecoding.resolve` runs when the query starts (the driver's ``DataSource.schema()``)
and fixes the reader schemas; the object is picklable and travels to the read tasks, where
:meth:`RecordDecoding.decode` turns each Arrow batch of Spark's Kafka schema into the decoded
schema (:meth:`RecordDecoding.output_schema`): the column becomes the reader schema's type, and
columns are added after Spark's Kafka columns:

- ``valueSchemaId`` (int): the writer's schema id (null: a null value, or no framing);
- with ``mode`` PERMISSIVE, ``valueError`` (string: why the row did not decode, null when it
  did) and ``valueRaw`` (binary: the row's bytes when it did not decode, else null) - the
  dead-letter route: write ``valueRaw`` to another topic in the same transaction.

(``key...`` alike.) A null value (a tombstone) stays null and is no error. With FAILFAST (the
default) the first record that does not decode stops the task with a
:class:`~unaligned.errors.RecordFormatError` naming its topic-partition, offset and reason.
Records are decoded per writer schema id, column-wise (:mod:`unaligned.registry.codecs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from unaligned.errors import RecordFormatError, SchemaNotFoundError
from unaligned.registry import avro_vectors as av
from unaligned.registry.codecs import decoder_for, reader_type
from unaligned.registry.framing import split_frames
from unaligned.registry.options import ColumnFormat, DecodeMode, RecordFormats, RegistryConfig
from unaligned.registry.schemas import (
    ResolvedSchema,
    client_for,
    remember,
    resolve_reader,
    subject_schemas,
    writer_schema,
)

NOT_FRAMED = "no Schema Registry framing (magic byte 0 and a 4-byte schema id)"


@dataclass(frozen=True)
class ColumnReading:
    """A column's format and the reader schema resolved for it when the query started."""

    format: ColumnFormat
    reader: ResolvedSchema
    known: tuple[ResolvedSchema, ...] = ()
    """The subject's other versions when the query started (no request for their ids)."""

    @property
    def name(self) -> str:
        return self.format.column


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
            fields[at] = StructField(
                reading.name, reader_type(reading.format.format, reading.reader), True
            )
        for reading in self.columns:
            fields.append(StructField(f"{reading.name}SchemaId", IntegerType(), True))
            if self.formats.mode is DecodeMode.PERMISSIVE:
                fields.append(StructField(f"{reading.name}Error", StringType(), True))
                fields.append(StructField(f"{reading.name}Raw", BinaryType(), True))
        return StructType(fields)

    # --- read tasks ---------------------------------------------------------------------------

    def decode_all(
        self, batches: Iterable[pa.RecordBatch], base: StructType
    ) -> Iterator[pa.RecordBatch]:
        """Every batch of Spark's Kafka schema ``base`` decoded (what a read task yields)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.output_schema(base), timezone="UTC")
        for reading in self.columns:
            for known in (reading.reader, *reading.known):
                remember(self.formats.registry, known)
        for batch in batches:
            yield self.decode(batch, schema)

    def decode(self, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        """``batch`` (Spark's Kafka schema) decoded into ``schema`` (the Arrow form of
        :meth:`output_schema`)."""
        arrays = list(batch.columns)
        names = batch.schema.names
        added: list[pa.Array] = []
        for reading in self.columns:
            at = names.index(reading.name)
            target = schema.field(at).type
            decoded, ids, errors = _decode_column(
                arrays[at], reading, self.formats.registry, target
            )
            if errors and self.formats.mode is DecodeMode.FAILFAST:
                row, reason = errors[0]
                raise _failure(batch, reading, row, reason)
            failed = np.zeros(len(decoded), bool)
            failed[[row for row, _ in errors]] = True
            raw = arrays[at]
            if failed.any():
                decoded = _null_where(decoded, failed)
            arrays[at] = decoded
            added.append(av.fixed_array(ids[0].astype(np.int32), pa.int32(), ids[1]))
            if self.formats.mode is DecodeMode.PERMISSIVE:
                added.append(_error_strings(len(decoded), errors))
                added.append(_raw_where(raw, failed))
        return pa.RecordBatch.from_arrays(arrays + added, schema=schema)


def _decode_column(
    values: pa.Array, reading: ColumnReading, registry: RegistryConfig, target: pa.DataType
) -> tuple[pa.Array, tuple[np.ndarray, np.ndarray], list[tuple[int, str]]]:
    """(decoded column, (schema ids, their validity), [(row, reason)] of rows that failed)."""
    frames = split_frames(values)
    reading_state = av.Reading(frames.data, frames.ends)
    parts: list[tuple[np.ndarray, pa.Array]] = []
    errors: list[tuple[int, str]] = [
        (int(row), NOT_FRAMED) for row in np.flatnonzero(frames.present & ~frames.framed)
    ]
    framed_ids = frames.schema_ids[frames.framed]
    for schema_id in np.unique(framed_ids).tolist():
        rows = np.flatnonzero(frames.framed & (frames.schema_ids == schema_id))
        reason = None
        try:
            writer = (
                reading.reader
                if schema_id == reading.reader.schema_id
                else writer_schema(registry, schema_id)
            )
            decoder = decoder_for(reading.format.format, reading.reader, writer)
        except SchemaNotFoundError:
            reason = f"schema id {schema_id} is not in the Schema Registry"
        except ValueError as exc:  # the writer's schema does not resolve to the reader's
            reason = (
                f"the writer's schema id {schema_id} cannot be read as the reader's "
                f"{reading.reader.describe()}: {exc}"
            )
        if reason is not None:
            errors += [(int(row), reason) for row in rows]
            continue
        parts.append((rows, decoder.decode(reading_state, frames, rows)))
    failed_rows = np.flatnonzero(reading_state.errors)
    errors += [(int(row), reading_state.reason(int(row))) for row in failed_rows]
    errors.sort()
    decoded = av.scatter(len(values), parts, target)
    return decoded, (frames.schema_ids, frames.framed), errors


def _null_where(array: pa.Array, failed: np.ndarray) -> pa.Array:
    """``array`` with the rows ``failed`` null."""
    index = np.arange(len(array), dtype=np.int64)
    return array.take(av.indices_array(index, ~failed))


def _error_strings(n: int, errors: list[tuple[int, str]]) -> pa.Array:
    if not errors:
        return pa.nulls(n, pa.string())
    texts = av.string_array([reason for _, reason in errors])
    index = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    rows = np.array([row for row, _ in errors], np.int64)
    index[rows] = np.arange(len(errors))
    valid[rows] = True
    return texts.take(av.indices_array(index, valid))


def _raw_where(raw: pa.Array, failed: np.ndarray) -> pa.Array:
    """The column's bytes on the rows that failed, null elsewhere (no copy of the bytes)."""
    if not failed.any():
        return pa.nulls(len(raw), pa.binary())
    buffers = raw.buffers()
    bits = np.concatenate([np.zeros(raw.offset, bool), failed])
    bitmap = pa.py_buffer(np.packbits(bits, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), len(raw), [bitmap, buffers[1], buffers[2]], offset=raw.offset
    )


def _failure(
    batch: pa.RecordBatch, reading: ColumnReading, row: int, reason: str
) -> RecordFormatError:
    names = batch.schema.names
    topic = batch.column(names.index("topic"))[row].as_py()
    partition = batch.column(names.index("partition"))[row].as_py()
    offset = batch.column(names.index("offset"))[row].as_py()
    name = reading.name
    return RecordFormatError(
        f"the {name} of {topic}-{partition} at offset {offset} does not decode as "
        f"{reading.format.format.value} with the reader's {reading.reader.describe()}: "
        f"{reason}. Set option mode=PERMISSIVE to read such records as a null {name} with the "
        f"reason in column '{name}Error' and the bytes in '{name}Raw'"
    )
