"""Protobuf: schemas compiled by protoc, mapped to Spark types, rows encoded and read back,
records of another message refused."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, TimestampType

from unaligned.errors import RecordFormatError
from unaligned.registry.avro.vectors import Reading
from unaligned.registry.connection.client import RegisteredSchema
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.framing import frame_payloads, split_frames
from unaligned.registry.options import ColumnFormat, Format, SchemaChoice
from unaligned.registry.protobuf.proto_text import derive_proto
from unaligned.registry.protobuf.protobuf_format import (
    ProtobufColumnDecoder,
    ProtobufRowEncoder,
    protobuf_spark_type,
)

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


COLUMN = ColumnFormat("value", Format.PROTOBUF, SchemaChoice())


def resolved(text: str, schema_id: int = 5) -> ResolvedSchema:
    return ResolvedSchema(RegisteredSchema(schema_id, "PROTOBUF", text))


def test_derived_schemas_map_back_to_the_column_type() -> None:
    text = derive_proto(TYPE, "shop.Order")
    assert "package shop;" in text and "optional string name = 2;" in text
    spark = protobuf_spark_type(resolved(text), COLUMN)
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
    back = ProtobufColumnDecoder(COLUMN, schema, schema).decode(reading, frames, np.array([0, 2]))
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
    out = ProtobufColumnDecoder(COLUMN, schema, schema).decode(reading, frames, np.arange(2))
    assert out.to_pylist()[0] == {"a": 1}
    assert reading.reason(1).startswith("it holds message B, not the reader's A")


def test_protoc_errors_name_the_schema() -> None:
    with pytest.raises(RecordFormatError, match="protoc cannot compile schema id 9"):
        protobuf_spark_type(resolved("syntax = 'proto3'; message {", 9), COLUMN)


TWO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order { int64 id = 1; google.protobuf.Timestamp at = 2; }
message Refund {
  message Line { string sku = 1; }
  uint64 big = 1;
  uint32 small = 2;
  repeated Line lines = 3;
}
"""


def _serialized(text: str) -> str:
    """``text`` as Confluent's Python serializer registers it: a base64 FileDescriptorProto."""
    import base64

    from unaligned.registry.protobuf.protobuf_schema import compiled

    return base64.b64encode(compiled(resolved(text, 77)).file_proto.SerializeToString()).decode()


def _read(schema: ResolvedSchema, column: ColumnFormat, payload: bytes, prefix: bytes) -> object:
    frames = split_frames(frame_payloads(np.array([5]), pa.array([payload]), pa.array([prefix])))
    reading = Reading(frames.data, frames.ends)
    out = ProtobufColumnDecoder(column, schema, schema).decode(reading, frames, np.arange(1))
    return out.to_pylist()[0] if not reading.errors.any() else reading.reason(0)


def test_a_serialized_descriptor_loads_without_protoc_and_maps_like_text() -> None:
    from unaligned.registry.protobuf.protobuf_schema import is_serialized

    text_schema, serialized = resolved(TWO, 6), resolved(_serialized(TWO), 7)
    assert is_serialized(serialized.schema.text) and not is_serialized(TWO)
    assert protobuf_spark_type(serialized, COLUMN) == protobuf_spark_type(text_schema, COLUMN)


def test_the_message_comes_from_the_indexes_and_the_option_names_the_readers() -> None:
    from dataclasses import replace

    from google.protobuf.descriptor import FieldDescriptor

    from unaligned.registry.protobuf.protobuf_schema import compiled, message_index_bytes

    schema = resolved(_serialized(TWO), 8)
    refund = replace(COLUMN, message_name="Refund")
    nested = replace(COLUMN, message_name="shop.Refund.Line")
    loaded = compiled(schema)
    assert loaded.path_of("shop.Refund") == (1,) and loaded.path_of("shop.Refund.Line") == (1, 0)
    assert (
        message_index_bytes((1,)) == b"\x02\x02" and message_index_bytes((1, 0)) == b"\x04\x02\x00"
    )
    cls = loaded.message_class(loaded.message((1,)))
    payload = cls(big=2**64 - 1, small=2**32 - 1, lines=[{"sku": "a"}]).SerializeToString()
    # Spark's from_protobuf: uint64 wraps to a negative bigint, uint32 to a negative int
    assert _read(schema, refund, payload, b"\x02\x02") == {
        "big": -1,
        "small": -1,
        "lines": [{"sku": "a"}],
    }
    upcast = replace(refund, upcast_unsigned=True)
    spark = protobuf_spark_type(schema, upcast)
    assert spark["big"].dataType.simpleString() == "decimal(20,0)"
    assert spark["small"].dataType == LongType()
    got = _read(schema, upcast, payload, b"\x02\x02")
    assert isinstance(got, dict) and got["big"] == 2**64 - 1 and got["small"] == 2**32 - 1
    # the first message's record read as Refund fails, naming both
    assert "holds message shop.Order, not the reader's shop.Refund" in str(
        _read(schema, refund, b"\x08\x01", b"\x00")
    )
    assert _read(schema, nested, b"\x0a\x01x", b"\x04\x02\x00") == {"sku": "x"}
    with pytest.raises(RecordFormatError, match="no message 'Nope'.*shop.Order, shop.Refund"):
        protobuf_spark_type(schema, replace(COLUMN, message_name="Nope"))
    assert FieldDescriptor.TYPE_UINT64 == loaded.message((1,)).fields_by_name["big"].type


def test_the_sink_writes_the_named_message_with_its_indexes() -> None:
    from dataclasses import replace  # noqa: F401

    schema = resolved(TWO, 9)
    encoder = ProtobufRowEncoder(schema, "Refund")
    assert encoder.prefix == b"\x02\x02"
    t = pa.struct([("big", pa.int64()), ("small", pa.int32())])
    payload = encoder.encode(pa.array([{"big": -1, "small": 7}], t))[0].as_py()
    column = ColumnFormat("value", Format.PROTOBUF, SchemaChoice(), message_name="Refund")
    assert _read(schema, column, payload, encoder.prefix) == {"big": -1, "small": 7, "lines": []}


def test_decimals_and_dates_are_refused_with_the_way_out() -> None:
    for t in (pa.decimal128(10, 2), pa.date32()):
        with pytest.raises(RecordFormatError, match="Cast it to a string"):
            derive_proto(pa.struct([("x", t)]), "shop.Order")
