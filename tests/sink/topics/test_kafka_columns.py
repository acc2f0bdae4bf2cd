"""The Kafka sink's input columns: finding and type-checking them, and their values as record
fields. Pure checks on Spark types and Arrow arrays: no Spark session, no broker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from unaligned.errors import SchemaMismatchError, SinkConfigurationError
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.stream_writer_factory import build_stream_writer
from unaligned.sink.topics.kafka_columns import KafkaColumns, kafka_columns


def _target(tmp_path: Path, topic: str | None = "t") -> KafkaTarget:
    options = {"checkpointlocation": str(tmp_path), "kafka.bootstrap.servers": "127.0.0.1:1"}
    target = SinkOptions.parse({**options, **({"topic": topic} if topic else {})}).target
    assert isinstance(target, KafkaTarget)
    return target


def _schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in fields])


# --- which columns ------------------------------------------------------------------------------


def test_columns_are_found_case_insensitively_and_others_ignored(tmp_path: Path) -> None:
    headers = ArrayType(
        StructType(
            [StructField("KEY", StringType(), False), StructField("Value", BinaryType(), False)]
        ),
        containsNull=False,
    )  # nullability and the case of field names do not matter
    schema = _schema(
        ("x", LongType()),
        ("VALUE", BinaryType()),
        ("Key", StringType()),
        ("Partition", IntegerType()),
        ("Headers", headers),
        ("TOPIC", StringType()),
        ("Timestamp", TimestampType()),
    )
    assert kafka_columns(schema, _target(tmp_path, topic=None)) == KafkaColumns(
        value=1, key=2, topic=5, partition=3, headers=4, timestamp=6
    )
    assert kafka_columns(_schema(("value", StringType())), _target(tmp_path)) == KafkaColumns(
        value=0, key=None, topic=None, partition=None, headers=None
    )


def test_the_value_column_is_required(tmp_path: Path) -> None:
    with pytest.raises(
        SchemaMismatchError, match="needs an input column 'value'.*input columns are key, k2"
    ):
        kafka_columns(_schema(("key", StringType()), ("k2", StringType())), _target(tmp_path))
    with pytest.raises(SchemaMismatchError, match="input columns are none"):
        kafka_columns(StructType([]), _target(tmp_path))


@pytest.mark.parametrize(
    "column, data_type, wanted",
    [
        (
            "Value",
            IntegerType(),
            "'Value' has type int; it must be string or binary: convert it with "
            "CAST(Value AS STRING) or CAST(Value AS BINARY), "
            'e.g. selectExpr("CAST(Value AS STRING) AS Value", ...)',
        ),
        (
            "key",
            LongType(),
            "'key' has type bigint; it must be string or binary: convert it with "
            "CAST(key AS STRING) or CAST(key AS BINARY)",
        ),
        (
            "topic",
            BinaryType(),
            "'topic' has type binary; it must be string: convert it with CAST(topic AS STRING)",
        ),
        (
            "partition",
            LongType(),
            "'partition' has type bigint; it must be int: convert it with CAST(partition AS INT)",
        ),
        (
            "timestamp",
            LongType(),
            "'timestamp' has type bigint; it must be timestamp: convert it with "
            "CAST(timestamp AS TIMESTAMP)",
        ),
        (
            "headers",
            ArrayType(StringType()),
            "'headers' has type array<string>; it must be array<struct",
        ),
        (
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", StringType())])
            ),
            "'headers' has type array<struct<key:string,value:string>>",
        ),
        (
            "headers",
            ArrayType(
                StructType([StructField("value", BinaryType()), StructField("key", StringType())])
            ),
            "'headers' has type array<struct<value:binary,key:string>>",
        ),
    ],
)
def test_a_wrong_type_is_refused_naming_column_and_types(
    tmp_path: Path, column: str, data_type: DataType, wanted: str
) -> None:
    fields = [("value", StringType())] if column.lower() != "value" else []
    with pytest.raises(SchemaMismatchError, match=re.escape(wanted)):
        kafka_columns(_schema(*fields, (column, data_type)), _target(tmp_path))


def test_topic_comes_from_the_option_or_the_column(tmp_path: Path) -> None:
    value_only = _schema(("value", StringType()))
    with_topic = _schema(("value", StringType()), ("topic", StringType()))
    with pytest.raises(
        SinkConfigurationError, match="needs option 'topic' or an input column 'topic'"
    ):
        kafka_columns(value_only, _target(tmp_path, topic=None))
    assert kafka_columns(with_topic, _target(tmp_path, topic=None)).topic == 1
    # Both given: the option wins, the column is not read.
    assert kafka_columns(with_topic, _target(tmp_path, topic="t")).topic is None
    # A topic column of the wrong type is refused even when the option is set.
    with pytest.raises(SchemaMismatchError, match="'topic' has type int"):
        kafka_columns(_schema(("value", StringType()), ("topic", IntegerType())), _target(tmp_path))


def test_schema_problems_are_named_when_the_writer_is_built(tmp_path: Path) -> None:
    options = {
        "checkpointlocation": str(tmp_path),
        "kafka.bootstrap.servers": "127.0.0.1:1",
        "transactionalidprefix": "p",
    }
    no_value = StructType([StructField("key", StringType())])
    with pytest.raises(SchemaMismatchError, match="'value'"):
        build_stream_writer({**options, "topic": "t"}, no_value)
    wrong_key = StructType([StructField("value", StringType()), StructField("key", LongType())])
    with pytest.raises(SchemaMismatchError, match="'key'.*bigint"):
        build_stream_writer({**options, "topic": "t"}, wrong_key)
    no_topic = StructType([StructField("value", StringType())])
    with pytest.raises(SinkConfigurationError, match="topic"):
        build_stream_writer(options, no_topic)


def test_with_a_registry_format_value_and_key_take_any_type_and_raw_bytes_ride_along(
    tmp_path: Path,
) -> None:
    options = {
        "checkpointlocation": str(tmp_path),
        "kafka.bootstrap.servers": "127.0.0.1:1",
        "topic": "t",
        "valueFormat": "avro-confluent",
        "schema.registry.url": "http://registry:8081",
    }
    target = SinkOptions.parse(options).target
    assert isinstance(target, KafkaTarget)
    record = StructType([StructField("id", IntegerType())])
    schema = _schema(("value", record), ("valueRaw", BinaryType()), ("key", StringType()))
    columns = kafka_columns(schema, target)
    assert (columns.value, columns.value_raw, columns.key, columns.key_raw) == (0, 1, 2, None)
    with pytest.raises(SchemaMismatchError, match="'valueRaw' has type string"):
        kafka_columns(_schema(("value", record), ("valueRaw", StringType())), target)
    with pytest.raises(SchemaMismatchError, match="'value' has type struct"):
        kafka_columns(_schema(("value", record)), _target(tmp_path))
