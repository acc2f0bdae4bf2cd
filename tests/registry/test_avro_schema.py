"""Avro schemas mapped to Spark types as Spark's from_avro maps them."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from unaligned.errors import RecordFormatError
from unaligned.registry.avro.schema import parse_avro, spark_type


def mapped(schema: object, referenced: tuple[object, ...] = ()) -> tuple[object, bool]:
    return spark_type(parse_avro(json.dumps(schema), [json.dumps(r) for r in referenced]))


@pytest.mark.parametrize(
    "avro, spark, nullable",
    [
        ("string", StringType(), False),
        ({"type": "int", "logicalType": "date"}, DateType(), False),
        ({"type": "long", "logicalType": "timestamp-millis"}, TimestampType(), False),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, TimestampNTZType(), False),
        ({"type": "long", "logicalType": "time-micros"}, LongType(), False),
        ({"type": "string", "logicalType": "uuid"}, StringType(), False),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            DecimalType(9, 2),
            False,
        ),
        ({"type": "fixed", "name": "F", "size": 3}, BinaryType(), False),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, StringType(), False),
        (["null", "int"], IntegerType(), True),
        (["int", "long"], LongType(), False),
        (["null", "float", "double"], DoubleType(), True),
        (["null"], NullType(), True),
        (
            ["null", "int", "string"],
            StructType(
                [
                    StructField("member0", IntegerType(), True),
                    StructField("member1", StringType(), True),
                ]
            ),
            True,
        ),
        ({"type": "array", "items": ["null", "long"]}, ArrayType(LongType(), True), False),
        ({"type": "map", "values": "bytes"}, MapType(StringType(), BinaryType(), False), False),
    ],
)
def test_types_map_as_from_avro_maps_them(avro: object, spark: object, nullable: bool) -> None:
    assert mapped(avro) == (spark, nullable)


def test_records_nest_with_namespaces_and_references() -> None:
    address = {"type": "record", "name": "Address", "namespace": "geo", "fields": [
        {"name": "city", "type": "string"}]}  # fmt: skip
    customer = {
        "type": "record",
        "name": "Customer",
        "namespace": "shop",
        "fields": [
            {"name": "home", "type": "geo.Address"},
            {"name": "work", "type": ["null", "geo.Address"]},
        ],
    }
    spark, nullable = mapped(customer, (address,))
    city = StructType([StructField("city", StringType(), False)])
    assert spark == StructType([StructField("home", city, False), StructField("work", city, True)])
    assert not nullable


def test_a_recursive_record_is_refused_as_spark_refuses_it() -> None:
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}  # fmt: skip
    with pytest.raises(RecordFormatError, match="recursive at value.next"):
        mapped(node)


def test_an_unknown_type_name_is_a_clear_error() -> None:
    with pytest.raises(RecordFormatError, match="unknown type name 'Missing'"):
        mapped({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]})
