"""The Kafka sink's input columns: which ones and their types.

Input columns are the ones Spark's Kafka sink takes (matched case-insensitively, other columns
ignored):

===============  ======================================  =========================================
``value``        string or binary (required)             the record value (null: a tombstone)
``key``          string or binary                        the record key
``topic``        string                                  required unless option ``topic`` is set;
                                                         the option wins when both are given
``partition``    int                                     the partition (null: the partitioner)
``headers``      array<struct<key string, value binary>>  record headers
``timestamp``    timestamp                               the record timestamp (null: the time the
                                                         task encodes the row's chunk)
===============  ======================================  =========================================

With option ``valueFormat`` (``keyFormat``) set to a Schema Registry format, ``value``
(``key``) may have any type, usually a struct, and is encoded with a registered schema
(:mod:`unaligned.registry.record_encoding`); a binary ``valueRaw`` (``keyRaw``) column is written
unchanged for rows whose ``value`` is null (the dead-letter route).

:func:`kafka_columns` finds and type-checks them when the stream writer is built
(:func:`unaligned.sink.stream_writer_factory.build_stream_writer`), before any data moves;
nullability is ignored. Tasks encode them straight from Arrow
(:mod:`unaligned.sink.topics.kafka_batches`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    AtomicType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from unaligned.errors import SchemaMismatchError, SinkConfigurationError
from unaligned.sink.kafka_target import KafkaTarget

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
    value_raw: int | None = None
    key_raw: int | None = None
    timestamp: int | None = None


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

    formats = target.formats
    encoded = {c.column for c in formats.columns} if formats is not None else set()

    def column_or_encoded(name: str) -> int | None:
        if name in encoded:
            found = by_name.get(name)
            return None if found is None else found[0]
        return column(name, (StringType(), BinaryType()), "string or binary")

    value = column_or_encoded("value")
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
        key=column_or_encoded("key"),
        topic=topic if target.topic is None else None,
        partition=column("partition", (IntegerType(),), "int"),
        headers=column("headers", (_HEADERS_TYPE,), "array<struct<key: string, value: binary>>"),
        value_raw=column("valueraw", (BinaryType(),), "binary") if "value" in encoded else None,
        key_raw=column("keyraw", (BinaryType(),), "binary") if "key" in encoded else None,
        timestamp=column("timestamp", (TimestampType(),), "timestamp"),
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
