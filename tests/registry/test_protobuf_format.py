"""Protobuf: schemas compiled by protoc, mapped to Spark types, rows encoded and read back,
records of another message refused."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, TimestampType

from unaligned.errors import RecordFormatError
from unaligned.registry.avro_vectors import Reading
from unaligned.registry.client import RegisteredSchema
from unaligned.registry.framing import frame_payloads, split_frames
from unaligned.registry.proto_text import derive_proto
from unaligned.registry.protobuf_format import (
    ProtobufColumnDecoder,
    ProtobufRowEncoder,
    protobuf_spark_type,
)
from unaligned.registry.schemas import ResolvedSchema

TYPE = pa.struct(
    [
        pa.field("id", pa.int64(), False),
        pa.field("name", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), False))),
        pa.field("m", pa.map_(pa.string(), pa.int32())),
        pa.field("inner", pa.struct([pa.field("x", pa.float64())])),
    ]
)


def resolved(text: str, schema_id: int = 5) -> ResolvedSchema:
    return ResolvedSchema(RegisteredSchema(schema_id, "PROTOBUF", text))


def test_derived_schemas_map_back_to_the_column_type() -> None:
    text = derive_proto(TYPE, "shop.Order")
    assert "package shop;" in text and "optional string name = 2;" in text
    spark = protobuf_spark_type(resolved(text))
    assert spark["id"].dataType == LongType() and spark["at"].dataType == TimestampType()
    assert spark["tags"].dataType == ArrayType(StringType(), False)
    assert spark["m"].dataType.simpleString() == "map<string,int>"
    assert isinstance(spark["m"].dataType, MapType)


def test_rows_round_trip() -> None:
    rows = [
        {
            "id": 1,
            "name": "a",
            "at": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
            "tags": ["x", "y"],
            "m": [("k", 3)],
            "inner": {"x": 1.5},
        },  # fmt: skip
        None,
        {"id": 2, "name": None, "at": None, "tags": [], "m": [], "inner": None},
    ]
    schema = resolved(derive_proto(TYPE, "Order"))
    encoder = ProtobufRowEncoder(schema)
    payloads = encoder.encode(pa.array(rows, TYPE))
    prefixes = pa.array([encoder.prefix] * 3)
    frames = split_frames(frame_payloads(np.array([5, 5, 5]), payloads, prefixes))
    reading = Reading(frames.data, frames.ends)
    back = ProtobufColumnDecoder(schema, schema).decode(reading, frames, np.array([0, 2]))
    assert not reading.errors.any()
    got = back.to_pylist()
    assert got[0]["at"] == rows[0]["at"] and got[0]["m"] == [("k", 3)]
    assert got[1] == rows[2]


def test_a_record_of_another_message_fails_as_the_mode_says() -> None:
    text = 'syntax = "proto3";\nmessage A { int32 a = 1; }\nmessage B { string b = 1; }\n'
    schema = resolved(text)
    frames = split_frames(
        frame_payloads(
            np.array([5, 5]),
            pa.array([b"\x08\x01", b"\x0a\x01x"]),
            pa.array([b"\x00", b"\x02\x02"]),
        )  # fmt: skip
    )
    reading = Reading(frames.data, frames.ends)
    out = ProtobufColumnDecoder(schema, schema).decode(reading, frames, np.arange(2))
    assert out.to_pylist()[0] == {"a": 1}
    assert reading.reason(1) == "it holds message B, not the reader's A"


def test_protoc_errors_name_the_schema() -> None:
    with pytest.raises(RecordFormatError, match="protoc cannot compile schema id 9"):
        protobuf_spark_type(resolved("syntax = 'proto3'; message {", 9))
