"""Arrow <-> Avro: the schema mapping, the column-wise row encoder (byte-equal to fastavro) and
the way back from decoded records, without files or a channel-state writer."""

from __future__ import annotations

import datetime as dt
import decimal
import io

import fastavro
import pyarrow as pa
import pytest

from channel_state_rows import KAFKA_SCHEMA
from unaligned.channel_state.avro_rows import (
    avro_schema,
    encode_rows,
    records_to_batch,
    storage_schema,
    view_as,
)
from unaligned.errors import SchemaMismatchError


def kafka_row(i: int) -> dict:
    return {
        "key": None if i % 3 == 0 else f"key-{i}".encode(),
        "value": None if i % 7 == 0 else f"{i:08d}".encode() * 4,
        "topic": None if i % 11 == 0 else "events",
        "partition": None if i % 2 else i % 4,
        "headers": None
        if i % 5 == 0
        else [{"key": "h", "value": None}, {"key": "n", "value": str(i).encode()}][: i % 3],
    }


def encode(batch: pa.RecordBatch) -> bytes:
    return encode_rows(view_as(batch, storage_schema(batch.schema, for_read=False)))


def fastavro_encoding(batch: pa.RecordBatch) -> bytes:
    parsed = fastavro.parse_schema(avro_schema(batch.schema))
    out = io.BytesIO()
    for row in batch.to_pylist():
        fastavro.schemaless_writer(out, parsed, row)
    return out.getvalue()


def decode(data: bytes, schema: pa.Schema, num_rows: int) -> pa.RecordBatch:
    parsed = fastavro.parse_schema(avro_schema(schema))
    stream = io.BytesIO(data)
    records = [fastavro.schemaless_reader(stream, parsed) for _ in range(num_rows)]
    assert stream.read() == b""
    return records_to_batch(records, storage_schema(schema, for_read=True), schema)


def test_avro_schema_of_kafka_rows() -> None:
    schema = avro_schema(KAFKA_SCHEMA)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert types["key"] == ["null", "bytes"]
    assert types["topic"] == ["null", "string"]
    assert types["partition"] == ["null", "int"]
    headers = types["headers"][1]
    assert headers["type"] == "array"
    assert headers["items"]["type"] == "record"  # not nullable: no union
    item_types = [f["type"] for f in headers["items"]["fields"]]
    assert item_types == [["null", "string"], ["null", "bytes"]]
    required = pa.schema([pa.field("value", pa.binary(), nullable=False), ("n", pa.int64())])
    assert [f["type"] for f in avro_schema(required)["fields"]] == ["bytes", ["null", "long"]]
    ts = avro_schema(pa.schema([pa.field("t", pa.timestamp("us", tz="UTC"), nullable=False)]))
    assert ts["fields"][0]["type"] == {"type": "long", "logicalType": "timestamp-micros"}


def test_generic_types_round_trip_exactly() -> None:
    inner = pa.struct([("z", pa.timestamp("us", tz="UTC")), ("flag", pa.bool_())])
    schema = pa.schema(
        [
            pa.field("b", pa.bool_(), nullable=False),
            ("i8", pa.int8()),
            ("i64", pa.int64()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("s", pa.large_string()),
            ("dec", pa.decimal128(12, 3)),
            ("day", pa.date32()),
            ("tod", pa.time64("us")),
            ("ts", pa.timestamp("us")),
            ("tz", pa.timestamp("us", tz="Asia/Tokyo")),
            ("ms", pa.timestamp("ms")),
            ("ns", pa.timestamp("ns")),
            ("nothing", pa.null()),
            ("st", pa.struct([("a", pa.int64()), ("inner", inner)])),
            ("nested", pa.large_list(pa.list_(pa.int32()))),
        ],
        metadata={b"origin": b"test"},
    )
    full = {
        "b": True,
        "i8": -3,
        "i64": 2**62,
        "f": 1.5,
        "d": -2.25,
        "s": "héllo",
        "dec": decimal.Decimal("123456789.123"),
        "day": dt.date(2024, 2, 29),
        "tod": dt.time(1, 2, 3, 4),
        "ts": dt.datetime(2024, 1, 1, 12, 0, 0, 1),
        "tz": 1_700_000_000_000_001,
        "ms": -5,
        "ns": 1_234_567_891,
        "nothing": None,
        "st": {"a": 5, "inner": {"z": 17, "flag": None}},
        "nested": [[1, None], [], None],
    }
    empty = {name: None for name in schema.names} | {"b": False}
    batch = pa.RecordBatch.from_pylist([empty, full, empty, full], schema=schema).slice(1, 2)
    data = encode(batch)
    back = decode(data, schema, batch.num_rows)
    assert back.schema.equals(schema, check_metadata=True)
    assert pa.Table.from_batches([back]).equals(pa.Table.from_batches([batch]))
    assert back.to_pylist() == batch.to_pylist() and back.num_rows == 2


def test_row_encoding_equals_fastavro_for_sliced_nested_input() -> None:
    # rows are encoded column-wise; the bytes must be exactly fastavro's row encoding
    schema = pa.schema(
        [
            pa.field("n", pa.int64(), nullable=False),
            ("i", pa.int32()),
            ("f", pa.float32()),
            ("ok", pa.bool_()),
            ("st", pa.struct([pa.field("a", pa.string(), nullable=False), ("b", pa.binary())])),
            ("ll", pa.list_(pa.list_(pa.field("x", pa.int64(), nullable=False)))),
        ]
        + list(KAFKA_SCHEMA)
    )
    extremes = [0, -1, 1, 63, 64, -64, -65, 8191, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    rows = []
    for i in range(len(extremes) * 9):
        rows.append(
            {
                "n": extremes[i % len(extremes)],
                "i": None if i % 4 == 0 else extremes[i % 11] % 2**31 - 2**30,
                "f": None if i % 6 == 0 else i / 8,
                "ok": None if i % 5 == 0 else bool(i % 2),
                "st": None if i % 7 == 0 else {"a": "é" * (i % 3), "b": None if i % 2 else b"b"},
                "ll": None if i % 8 == 0 else [[i, -i]] * (i % 3) + [[]],
                **kafka_row(i),
            }
        )
    batch = pa.RecordBatch.from_pylist(rows, schema=schema).slice(5, 100)
    # sliced chunks of a sliced batch, as the writer encodes them
    chunks = [batch.slice(0, 37)] + [batch.slice(start, 10) for start in range(37, 100, 10)]
    written = b"".join(encode(chunk) for chunk in chunks)
    assert written == fastavro_encoding(batch)
    assert encode(batch.slice(0, 0)) == b""
    back = decode(written, schema, batch.num_rows)
    assert pa.Table.from_batches([back]).equals(pa.Table.from_batches([batch]))


def test_unsupported_types_and_names_are_refused() -> None:
    with pytest.raises(SchemaMismatchError, match=r"column 'm' has type map<string, int32>"):
        avro_schema(pa.schema([("m", pa.map_(pa.string(), pa.int32()))]))
    with pytest.raises(SchemaMismatchError, match=r"column 'my col'"):
        avro_schema(pa.schema([("my col", pa.int32())]))
    with pytest.raises(SchemaMismatchError, match=r"column 'x.u'"):
        avro_schema(pa.schema([("x", pa.struct([("u", pa.uint64())]))]))
