"""Column-wise Avro decoding against fastavro, the reference writer: every type, schema
resolution across writer schemas, and malformed records marked, never raised."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest

from avro_payloads import payloads, read
from unaligned.registry.avro import vectors as av
from unaligned.registry.avro.decoder import SchemaResolutionError

INNER = {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}
EVERYTHING = {
    "type": "record",
    "name": "R",
    "namespace": "ex",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "s", "type": "string"},
        {"name": "ns", "type": ["null", "string"]},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "b", "type": "boolean"},
        {"name": "by", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "arr", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "dt", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "dec",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {
            "name": "fdec",
            "type": {
                "type": "fixed",
                "name": "F6",
                "size": 6,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 3,
            },
        },  # fmt: skip
        {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
        {"name": "u", "type": ["null", "int", "string", INNER]},
        {"name": "nested", "type": {"type": "array", "items": "In"}},
    ],
}
UTC = datetime.timezone.utc


def record(k: int) -> dict[str, Any]:
    return {
        "id": ((k * 7919) ** 3 % 2**62) * (-1) ** k,
        "i": -(2**31) + k * 977,
        "s": "é" * (k % 17),
        "ns": None if k % 3 == 0 else f"n{k}",
        "f": k / 4,
        "d": k / 7,
        "b": k % 2 == 0,
        "by": bytes(range(k % 9)),
        "e": ["RED", "GREEN"][k % 2],
        "arr": list(range(k % 5)),
        "m": {f"k{j}": (None if j % 2 else j * 10**12) for j in range(k % 4)},
        "ts": datetime.datetime(2020, 1, 1, tzinfo=UTC)
        + datetime.timedelta(milliseconds=k * 12345),
        "dt": datetime.date(1960, 1, 1) + datetime.timedelta(days=k * 300),
        "dec": decimal.Decimal(k * 37 - 5000) / 100,
        "fdec": decimal.Decimal(-k * 123457) / 1000,
        "fx": bytes([k % 256] * 4),
        "u": [None, k, f"s{k}", {"x": k}][k % 4],
        "nested": [{"x": j} for j in range(k % 3)],
    }


def expected(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out["m"] = list(r["m"].items())
    u = r["u"]
    out["u"] = (
        None
        if u is None
        else {
            "member0": u if isinstance(u, int) else None,
            "member1": u if isinstance(u, str) else None,
            "member2": u if isinstance(u, dict) else None,
        }
    )
    return out


def test_every_type_reads_as_fastavro_wrote_it() -> None:
    records = [record(k) for k in range(300)]
    blobs = payloads(EVERYTHING, records)
    array, reading, pos = read(EVERYTHING, EVERYTHING, blobs)
    array.validate(full=True)
    assert not reading.errors.any()
    assert pos.tolist() == list(__import__("itertools").accumulate(len(b) for b in blobs))
    for got, want in zip(array.to_pylist(), map(expected, records), strict=True):
        assert got["f"] == pytest.approx(want.pop("f"))
        got.pop("f")
        assert got == want


V1 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "string", "default": "anon"},
        {"name": "level", "type": {"type": "enum", "name": "L", "symbols": ["LOW", "HIGH", "TOP"]}},
    ],
}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "id", "type": "long"},  # promoted
        {
            "name": "level",
            "type": {"type": "enum", "name": "L", "symbols": ["LOW", "HIGH"], "default": "LOW"},
        },  # fmt: skip
        {"name": "email", "type": ["null", "string"], "default": None},  # added
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": ["new"]},
    ],  # name removed
}


def test_a_writer_schema_resolves_to_the_readers() -> None:
    blobs = payloads(
        V1, [{"id": 1, "name": "a", "level": "HIGH"}, {"id": 2, "name": "b", "level": "TOP"}]
    )
    array, reading, _ = read(V1, V2, blobs)
    assert not reading.errors.any()
    assert array.to_pylist() == [
        {"id": 1, "level": "HIGH", "email": None, "tags": ["new"]},
        {"id": 2, "level": "LOW", "email": None, "tags": ["new"]},  # unknown symbol: default
    ]
    # back again: the reader has a field (name) the writer removed, and wants id as long
    reader = V1 | {"fields": [V1["fields"][1], {"name": "id", "type": "long"}]}
    v2_record = {"id": 5, "level": "LOW", "email": "x", "tags": []}
    back, reading, _ = read(V2, reader, payloads(V2, [v2_record]))
    assert back.to_pylist() == [{"name": "anon", "id": 5}]


def test_a_reader_field_without_default_missing_from_the_writer_does_not_resolve() -> None:
    reader = {"type": "record", "name": "User", "fields": [{"name": "email", "type": "string"}]}
    with pytest.raises(SchemaResolutionError, match="value.email is not in the writer"):
        read(V1, reader, [])
    with pytest.raises(SchemaResolutionError, match="cannot be read as the reader's"):
        read({"type": "record", "name": "Other", "fields": []}, reader, [])


def test_a_writer_union_against_a_plain_reader_field_marks_only_the_records_it_cannot_read() -> (
    None
):
    writer = {"type": "record", "name": "R", "fields": [{"name": "v", "type": ["null", "int"]}]}
    reader = {"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}
    array, reading, _ = read(writer, reader, payloads(writer, [{"v": 4}, {"v": None}]))
    assert array.to_pylist()[0] == {"v": 4}
    assert reading.errors.tolist() == [0, av.UNRESOLVED_BRANCH]


def test_malformed_records_are_marked_with_their_reason() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "n", "type": "long"}, {"name": "s", "type": "string"},
        {"name": "u", "type": ["null", "int"]}]}  # fmt: skip
    good = payloads(schema, [{"n": 1, "s": "abc", "u": 2}])[0]
    blobs = [
        good,
        b"\xff" * 11,  # a varint that never ends
        b"\x02\x7f",  # a string longer than the record
        b"\x02\x00\x08",  # union branch 4 of 2
        good[:-1],  # cut short: reads past its end
    ]
    array, reading, pos = read(schema, schema, blobs)
    codes = reading.errors.tolist()
    assert codes[0] == 0 and array.to_pylist()[0] == {"n": 1, "s": "abc", "u": 2}
    assert codes[1] in (av.VARINT_TOO_LONG, av.BAD_LENGTH)
    assert codes[2] == av.BAD_LENGTH
    assert codes[3] == av.BAD_BRANCH
    ends = [sum(len(b) for b in blobs[: i + 1]) for i in range(len(blobs))]
    assert pos[4] > ends[4]  # the caller marks it TRUNCATED
    assert reading.reason(3) == "a union branch index is out of range"


def test_array_blocks_with_byte_sizes_and_several_blocks_read_whole() -> None:
    schema = {"type": "array", "items": "int"}
    # block of 2 items with its byte size (count -2, size 2), then a block of 1, then the end
    blob = bytes([0x03, 0x04, 0x02, 0x04, 0x02, 0x08, 0x00])
    array, reading, _ = read(schema, schema, [blob, payloads(schema, [[7]])[0]])
    assert not reading.errors.any()
    assert array.to_pylist() == [[1, 2, 4], [7]]


def test_a_short_string_at_the_very_end_reads_whole_beside_long_ones() -> None:
    """Strings are cut from windows as wide as the longest: the last record's short string,
    near the end of the bytes, must not be read from a window clipped to the buffer."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    records = [{"s": "x" * 45}, {"s": "ab"}]
    array, reading, _ = read(schema, schema, payloads(schema, records))
    assert not reading.errors.any()
    assert array.to_pylist() == records


def test_random_bytes_never_raise_they_are_marked() -> None:
    """Garbage in every field (random bytes, good records cut or with bytes flipped) only
    marks records: the batch decodes to the end and good records stay good."""
    import random

    rng = random.Random(5)
    good = payloads(EVERYTHING, [record(k) for k in range(40)])
    blobs = []
    for blob in good:
        kind = rng.randrange(4)
        if kind == 0:
            blobs.append(bytes(rng.randrange(256) for _ in range(rng.randrange(60))))
        elif kind == 1:
            blobs.append(blob[: rng.randrange(len(blob))])
        elif kind == 2:
            flipped = bytearray(blob)
            flipped[rng.randrange(len(flipped))] ^= 0xFF
            blobs.append(bytes(flipped))
        else:
            blobs.append(blob)
    array, reading, pos = read(EVERYTHING, EVERYTHING, blobs)
    assert len(array) == len(blobs)
    ends = list(__import__("itertools").accumulate(len(b) for b in blobs))
    for i, blob in enumerate(blobs):
        if blob == good[i]:
            assert reading.errors[i] == 0 and pos[i] == ends[i]
            got, want = array[i].as_py(), expected(record(i))
            assert got.pop("f") == pytest.approx(want.pop("f")) and got == want
