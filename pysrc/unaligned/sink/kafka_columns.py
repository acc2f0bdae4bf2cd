"""The Kafka sink's input columns: which ones, their types, and their values as record fields.

Input columns are the ones Spark's Kafka sink takes (matched case-insensitively, other columns
ignored):

===============  ======================================  =========================================
``value``        string or binary (required)             the record value (null: a tombstone)
``key``          string or binary                        the record key
``topic``        string                                  required unless option ``topic`` is set;
                                                         the option wins when both are given
``partition``    int                                     the partition (null: the partitioner)
``headers``      array<struct<key string, value binary>>  record headers
===============  ======================================  =========================================

:func:`kafka_columns` finds and type-checks them when the stream writer is built
(:func:`unaligned.sink.stream_writer_factory.build_stream_writer`), before any data moves;
nullability is ignored. :func:`send_records` sends a chunk's rows one record at a time, with
:func:`bytes_list` and :func:`headers_list` turning its columns into the values the task's
producer sends: the per-record path of
:class:`unaligned.sink.kafka_participant.KafkaTaskWriter` (step 1 of the protocol; the fast path
is :mod:`unaligned.sink.kafka_batches`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    AtomicType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from unaligned.errors import SchemaMismatchError, SinkConfigurationError
from unaligned.sink.options import KafkaTarget

_HEADERS_TYPE = ArrayType(
    StructType().add("key", StringType(), True).add("value", BinaryType(), True)
)


# --- schema, when the writer is built -------------------------------------------------------------


@dataclass(frozen=True)
class KafkaColumns:
    """Positions of the input columns the Kafka sink reads (``None``: column absent)."""

    value: int
    key: int | None
    topic: int | None
    partition: int | None
    headers: int | None


def kafka_columns(schema: StructType, target: KafkaTarget) -> KafkaColumns:
    """Find and type-check the sink's input columns; raises :class:`SchemaMismatchError`."""
    by_name: dict[str, tuple[int, DataType]] = {}
    for index, field in enumerate(schema.fields):
        by_name.setdefault(field.name.lower(), (index, field.dataType))

    def column(name: str, allowed: tuple[DataType, ...], wanted: str) -> int | None:
        found = by_name.get(name)
        if found is None:
            return None
        index, data_type = found
        if not any(_same_type(data_type, a) for a in allowed):
            spelled = schema.fields[index].name
            raise SchemaMismatchError(
                f"Kafka sink input column {spelled!r} has type "
                f"{data_type.simpleString()}; it must be {wanted}{_cast_hint(spelled, allowed)}"
            )
        return index

    value = column("value", (StringType(), BinaryType()), "string or binary")
    if value is None:
        raise SchemaMismatchError(
            f"Kafka sink needs an input column 'value' (string or binary); input columns are "
            f"{', '.join(schema.fieldNames()) or 'none'}"
        )
    topic = column("topic", (StringType(),), "string")
    if target.topic is None and topic is None:
        raise SinkConfigurationError(
            "Kafka sink needs option 'topic' or an input column 'topic' (string)"
        )
    return KafkaColumns(
        value=value,
        key=column("key", (StringType(), BinaryType()), "string or binary"),
        topic=topic if target.topic is None else None,
        partition=column("partition", (IntegerType(),), "int"),
        headers=column("headers", (_HEADERS_TYPE,), "array<struct<key: string, value: binary>>"),
    )


def _cast_hint(name: str, allowed: tuple[DataType, ...]) -> str:
    """How to convert the column, as users of Spark's Kafka sink do."""
    targets = [t.simpleString().upper() for t in allowed if isinstance(t, AtomicType)]
    if not targets:
        return ""
    casts = " or ".join(f"CAST({name} AS {t})" for t in targets)
    example = f'selectExpr("CAST({name} AS {targets[0]}) AS {name}", ...)'
    return f": convert it with {casts}, e.g. {example}"


def _same_type(actual: DataType, expected: DataType) -> bool:
    """Type equality ignoring nullability (Spark's sink accepts nullable and non-null alike)."""
    if isinstance(expected, ArrayType):
        return isinstance(actual, ArrayType) and _same_type(
            actual.elementType, expected.elementType
        )
    if isinstance(expected, StructType):
        return (
            isinstance(actual, StructType)
            and [f.name.lower() for f in actual.fields] == [f.name for f in expected.fields]
            and all(
                _same_type(a.dataType, e.dataType)
                for a, e in zip(actual.fields, expected.fields, strict=True)
            )
        )
    return type(actual) is type(expected)


# --- values, in the task ------------------------------------------------------------------------


def bytes_list(column: pa.Array) -> list[bytes | None]:
    """A string or binary Arrow column as Python bytes (strings UTF-8 encoded, in C++)."""
    if pa.types.is_string(column.type):
        column = pc.cast(column, pa.binary())
    elif pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.large_binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def headers_list(column: pa.Array) -> list[list[tuple[str, bytes]] | None]:
    """A ``headers`` column as per-row lists of ``(key, value)``; refuses a null key or value."""
    result: list[list[tuple[str, bytes]] | None] = []
    for entry in column.to_pylist():
        if entry is None:
            result.append(None)
            continue
        headers = []
        for header in entry:
            key, value = header["key"], header["value"]
            if key is None or value is None:
                raise SchemaMismatchError(
                    "Kafka sink input column 'headers' has a null header key or value; "
                    "the producer needs a string key and a binary value"
                )
            headers.append((key, value))
        result.append(headers)
    return result


SendRecord = Callable[..., None]
"""``send(topic, value, key=..., headers=..., partition=...)``, as
:meth:`unaligned.kafka.transactions.TransactionalWriter.send`."""


def send_records(
    chunk: pa.RecordBatch, cols: KafkaColumns, fixed_topic: str | None, send: SendRecord
) -> None:
    """Send every row of ``chunk`` as one record, in row order (option ``topic`` wins)."""
    values = bytes_list(chunk.column(cols.value))
    keys = bytes_list(chunk.column(cols.key)) if cols.key is not None else None
    topics = chunk.column(cols.topic).to_pylist() if cols.topic is not None else None
    partitions = chunk.column(cols.partition).to_pylist() if cols.partition is not None else None
    headers = headers_list(chunk.column(cols.headers)) if cols.headers is not None else None
    for i in range(len(values)):
        topic = fixed_topic if topics is None else topics[i]
        if topic is None:
            raise SchemaMismatchError(
                "Kafka sink input column 'topic' is null in a row and option 'topic' is not set"
            )
        send(
            topic,
            values[i],
            key=None if keys is None else keys[i],
            headers=None if headers is None else headers[i],
            partition=None if partitions is None else partitions[i],
        )
