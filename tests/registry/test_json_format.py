"""JSON Schema: mapped to Spark types, records decoded (a wrong type fails the record), rows
validated and encoded."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from unaligned.errors import RecordFormatError
from unaligned.registry.avro.vectors import Reading
from unaligned.registry.connection.client import RegisteredSchema
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.framing import frame_payloads, split_frames
from unaligned.registry.json_format import (
    JsonColumnDecoder,
    JsonRowEncoder,
    derive_json_schema,
    json_spark_type,
)

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "when": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "blob": {"type": "string", "contentEncoding": "base64"},
        "where": {"$ref": "#/definitions/Point"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["id"],
}


def resolved(schema: object) -> ResolvedSchema:
    return ResolvedSchema(RegisteredSchema(3, "JSON", json.dumps(schema)))


def test_the_schema_maps_to_spark_types() -> None:
    assert json_spark_type(resolved(SCHEMA)) == StructType(
        [
            StructField("id", LongType()),
            StructField("name", StringType()),
            StructField("when", TimestampType()),
            StructField("day", DateType()),
            StructField("blob", BinaryType()),
            StructField("where", StructType([StructField("x", DoubleType())])),
            StructField("tags", ArrayType(StringType())),
            StructField("counts", MapType(StringType(), LongType())),
            StructField("either", StringType()),
        ]
    )


def test_records_decode_and_a_wrong_type_fails_only_its_record() -> None:
    docs = [
        {
            "id": 1,
            "when": "2024-01-02T03:04:05Z",
            "where": {"x": 2},
            "counts": {"a": 1},
            "either": 5,
            "blob": "AAE=",
        },  # fmt: skip
        {"id": "one"},
        "not an object",
    ]
    values = pa.array([json.dumps(d).encode() for d in docs] + [b"{bad json"])
    frames = split_frames(frame_payloads(np.array([3, 3, 3, 3]), values))
    reading = Reading(frames.data, frames.ends)
    out = JsonColumnDecoder(resolved(SCHEMA)).decode(reading, frames, np.arange(4))
    first = out.to_pylist()[0]
    assert first["id"] == 1 and first["where"] == {"x": 2.0} and first["either"] == "5"
    assert first["counts"] == [("a", 1)] and first["blob"] == b"\x00\x01"
    assert first["when"].isoformat() == "2024-01-02T03:04:05+00:00"
    assert reading.errors.tolist()[0] == 0 and all(reading.errors[1:])
    assert "$.id is str, not an integer" in reading.reason(1)


def test_rows_are_validated_before_they_are_written() -> None:
    column_type = pa.struct([pa.field("id", pa.int64(), False), pa.field("name", pa.string())])
    schema = derive_json_schema(column_type, "shop.Person")
    assert schema["title"] == "shop.Person" and schema["required"] == ["id"]
    encoded = JsonRowEncoder(json.dumps(schema)).encode(
        pa.array([{"id": 1, "name": "x"}, None], column_type)
    )
    assert encoded.to_pylist() == [b'{"id":1,"name":"x"}', None]
    strict = {
        **schema,
        "properties": {**schema["properties"], "name": {"type": "string", "maxLength": 2}},
    }
    with pytest.raises(RecordFormatError, match="row 0 of the chunk, at name"):
        JsonRowEncoder(json.dumps(strict)).encode(
            pa.array([{"id": 1, "name": "long"}], column_type)
        )


def test_decimals_are_written_with_every_digit() -> None:
    import decimal
    import json

    from unaligned.registry.json_format import JsonRowEncoder, derive_json_schema

    t = pa.struct([pa.field("amount", pa.decimal128(38, 10)), pa.field("n", pa.int64())])
    encoder = JsonRowEncoder(json.dumps(derive_json_schema(t, "Payment")))
    exact = decimal.Decimal("1234567890123456789.0123456789")
    small = decimal.Decimal("-0.0000000001")
    out = encoder.encode(pa.array([{"amount": exact, "n": 1}, {"amount": small, "n": 2}], t))
    texts = [v.as_py() for v in out]
    assert texts[0] == b'{"amount":1234567890123456789.0123456789,"n":1}'
    assert json.loads(texts[1], parse_float=decimal.Decimal)["amount"] == small


def test_an_integer_out_of_range_fails_its_record_only() -> None:
    import numpy as np

    from unaligned.registry.avro.vectors import Reading
    from unaligned.registry.connection.client import RegisteredSchema
    from unaligned.registry.connection.schemas import ResolvedSchema
    from unaligned.registry.framing import frame_payloads, split_frames
    from unaligned.registry.json_format import JsonColumnDecoder

    schema = '{"type":"object","properties":{"n":{"type":"integer"}}}'
    reader = ResolvedSchema(RegisteredSchema(1, "JSON", schema))
    payloads = pa.array([b'{"n":1}', b'{"n":18446744073709551615}', b'{"n":3}'])
    frames = split_frames(frame_payloads(np.array([1, 1, 1]), payloads))
    reading = Reading(frames.data, frames.ends)
    out = JsonColumnDecoder(reader).decode(reading, frames, np.arange(3))
    assert out.to_pylist() == [{"n": 1}, None, {"n": 3}]
    assert reading.errors.tolist()[1] and "does not fit" in reading.reason(1)
