"""The sink's side: a ``value`` (or ``key``) column of any type becomes Confluent-framed bytes.

The schema each row is written with is chosen per topic, once per worker process
(:class:`WriterSchemas`):

1. ``valueSchemaId``: that registered schema;
2. ``valueSchemaVersion`` (a number or ``latest``): that version of ``valueSubject``, else of
   the topic's ``<topic>-value``;
3. otherwise the schema derived from the column's type (Avro as Spark's ``to_avro``:
   :func:`~unaligned.registry.avro.encoder.derive_avro`; JSON Schema; Protobuf), named
   ``valueRecordName``, under ``valueSubject`` or the naming strategy's subject
   (``valueSubjectNameStrategy``: ``topic`` -> ``<topic>-value``, ``record`` -> the record's
   full name, ``topic-record`` -> ``<topic>-<record>``). With ``autoRegisterSchemas`` (default
   true) it is registered (the registry returns the existing id when it holds it already),
   else it must be registered under that subject already.

Registering is idempotent, so a retried task, a speculative attempt or a zombie changes
nothing; a task that fails after registering leaves a registered schema, as Confluent's
serializers do. A row whose ``value`` is null and whose ``valueRaw`` (binary) is set is written
as those bytes unchanged: the dead-letter route for the source's PERMISSIVE rows
(:mod:`unaligned.registry.record_decoding`); both set is an error. A null ``value`` without
``valueRaw`` is a tombstone, as without a format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from unaligned._util.arrow import integers, valid_rows
from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import RecordFormatError, SchemaMismatchError
from unaligned.registry.avro import vectors as av
from unaligned.registry.connection.client import RegisteredSchema
from unaligned.registry.connection.schemas import ResolvedSchema, check_type, client_for
from unaligned.registry.framing import frame_payloads
from unaligned.registry.options import ColumnFormat, Format, RecordFormats, SubjectNameStrategy


class RowEncoder(Protocol):
    """Encodes a column's rows (a null row stays null) with one writer schema."""

    def encode(self, column: pa.Array) -> pa.Array: ...


class WriterSchema:
    """A registered schema the sink writes a column with, its encoder and Protobuf's message
    indexes (``prefix``, empty for other formats)."""

    def __init__(self, resolved: ResolvedSchema, encoder: RowEncoder, prefix: bytes) -> None:
        self.resolved = resolved
        self.encoder = encoder
        self.prefix = prefix


_WRITERS: ProcessMemo[tuple[RecordFormats, str, str, str], WriterSchema] = ProcessMemo()


def derived_schema(column: ColumnFormat, arrow_type: pa.DataType) -> tuple[str, str]:
    """(schema text, record full name) derived from ``arrow_type`` for ``column``'s format."""
    import json

    fmt, name = column.format, column.record_name
    if fmt is Format.AVRO:
        from unaligned.registry.avro.encoder import derive_avro

        return json.dumps(derive_avro(arrow_type, name)), name
    if fmt is Format.JSON_SCHEMA:
        from unaligned.registry.json_format import derive_json_schema

        return json.dumps(derive_json_schema(arrow_type, name)), name
    from unaligned.registry.protobuf.proto_text import derive_proto

    return derive_proto(arrow_type, name), name


def _encoder(column: ColumnFormat, resolved: ResolvedSchema) -> tuple[RowEncoder, bytes]:
    fmt = column.format
    texts = [s.text for _, s in resolved.referenced]
    if fmt is Format.AVRO:
        from unaligned.registry.avro.encoder import AvroRowEncoder

        return AvroRowEncoder(resolved.schema.text, texts), b""
    if fmt is Format.JSON_SCHEMA:
        from unaligned.registry.json_format import JsonRowEncoder

        return JsonRowEncoder(resolved.schema.text), b""
    from unaligned.registry.protobuf.protobuf_format import ProtobufRowEncoder

    encoder = ProtobufRowEncoder(resolved, column.message_name)
    return encoder, encoder.prefix


def writer_schema(
    formats: RecordFormats, column: ColumnFormat, topic: str, arrow_type: pa.DataType
) -> WriterSchema:
    """The schema ``column`` is written to ``topic`` with (module docstring), once per
    process. Raises :class:`~unaligned.errors.SchemaRegistryError` or
    :class:`RecordFormatError`."""
    key = (formats, column.column, topic, str(arrow_type))
    return _WRITERS.get_or_compute(key, lambda: _resolve(formats, column, topic, arrow_type))


def _resolve(
    formats: RecordFormats, column: ColumnFormat, topic: str, arrow_type: pa.DataType
) -> WriterSchema:
    client = client_for(formats.registry)
    choice, fmt = column.choice, column.format
    if choice.schema_id is not None:
        schema = client.schema_by_id(choice.schema_id)
    elif choice.pinned:
        subject = choice.subject or SubjectNameStrategy.TOPIC.subject(topic, "", column.column)
        schema = client.subject_version(subject, choice.version)
    else:
        text, name = derived_schema(column, arrow_type)
        subject = choice.subject or column.strategy.subject(topic, name, column.column)
        if formats.auto_register:
            schema = RegisteredSchema(
                client.register(subject, text, fmt.schema_type), fmt.schema_type, text
            )
        else:
            found = client.lookup(subject, text, fmt.schema_type)
            if found is None:
                raise RecordFormatError(
                    f"the {column.column} schema derived from the column's type is not "
                    f"registered under subject {subject!r}, and autoRegisterSchemas is false: "
                    f"register it, or set option '{column.column}SchemaVersion' or "
                    f"'{column.column}SchemaId' to write with a registered schema"
                )
            schema = found
    check_type(schema, fmt, column.column)
    resolved = ResolvedSchema(schema, client.referenced(schema))
    encoder, prefix = _encoder(column, resolved)
    return WriterSchema(resolved, encoder, prefix)


def encode_column(
    formats: RecordFormats,
    column: ColumnFormat,
    values: pa.Array,
    raw: pa.Array | None,
    topics: str | pa.Array,
) -> pa.Array:
    """``values`` framed and encoded per row's topic (``topics``: one topic, or a string
    column); rows with a null value take ``raw``'s bytes (module docstring)."""
    present = valid_rows(values)
    if raw is not None:
        both = present & valid_rows(raw)
        if both.any():
            row = int(np.flatnonzero(both)[0])
            raise SchemaMismatchError(
                f"row {row} of the chunk has both '{column.column}' and '{column.column}Raw' "
                f"set; '{column.column}Raw' is written only for rows whose '{column.column}' "
                "is null (the dead-letter route)"
            )
    groups = _topic_groups(topics, present)
    parts: list[tuple[np.ndarray, pa.Array]] = []
    for topic, rows in groups:
        writer = writer_schema(formats, column, topic, values.type)
        subset = values if len(rows) == len(values) else values.take(av.indices_array(rows))
        try:
            payloads = writer.encoder.encode(subset)
        except RecordFormatError as exc:
            raise RecordFormatError(
                f"the {column.column} column does not fit {writer.resolved.describe()} "
                f"({column.format.value}, topic {topic!r}): {exc}"
            ) from None
        ids = np.full(len(rows), writer.resolved.schema_id, np.int64)
        prefixes = None
        if writer.prefix:
            prefixes = _repeated(writer.prefix, len(rows))
        parts.append((rows, frame_payloads(ids, payloads, prefixes)))
    framed = av.scatter(len(values), parts, pa.binary())
    if raw is None or not valid_rows(raw).any():
        return framed
    return pc.if_else(av.bool_array(present), framed, raw.cast(pa.binary()))


def _topic_groups(topics: str | pa.Array, present: np.ndarray) -> Sequence[tuple[str, np.ndarray]]:
    rows = np.flatnonzero(present)
    if isinstance(topics, str):
        return [(topics, rows)] if rows.size else []
    encoded = topics.dictionary_encode()
    codes = integers(encoded.indices)[rows]
    names = encoded.dictionary.to_pylist()
    return [(names[code], rows[codes == code]) for code in np.unique(codes).tolist()]


def _repeated(prefix: bytes, n: int) -> pa.Array:
    data = np.frombuffer(prefix * n or b"\0", np.uint8)
    offsets = (np.arange(n + 1, dtype=np.int64) * len(prefix)).astype(np.int32)
    return av.binary_array(data, offsets, pa.binary())
