"""The sink's Avro: schemas derived as Spark's to_avro derives them, rows encoded and read back
by the column-wise decoder."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from unaligned.errors import RecordFormatError
from unaligned.registry.avro.decoder import compile_decoder
from unaligned.registry.avro.encoder import AvroRowEncoder, derive_avro
from unaligned.registry.avro.schema import parse_avro
from unaligned.registry.avro.vectors import Reading
from unaligned.registry.framing import binary_parts

TYPE = pa.struct(
    [
        pa.field("id", pa.int64(), False),
        pa.field("name", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("day", pa.date32()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), False))),
        pa.field("scores", pa.map_(pa.string(), pa.float64())),
        pa.field("inner", pa.struct([pa.field("x", pa.int32(), False)])),
    ]
)
ROWS = [
    {
        "id": 1,
        "name": "a",
        "at": datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2024, 5, 1),
        "amount": decimal.Decimal("12.34"),
        "tags": ["x"],
        "scores": [("s", 0.5)],
        "inner": {"x": 7},
    },
    None,
    {
        "id": 2,
        "name": None,
        "at": None,
        "day": None,
        "amount": None,
        "tags": [],
        "scores": [],
        "inner": None,
    },  # fmt: skip
]


def test_the_derived_schema_names_records_and_makes_nullable_fields_null_first() -> None:
    schema = derive_avro(TYPE, "shop.Order")
    assert schema["name"] == "Order" and schema["namespace"] == "shop"
    fields = {f["name"]: f for f in schema["fields"]}
    assert fields["id"]["type"] == "long" and "default" not in fields["id"]
    assert fields["name"] == {"name": "name", "type": ["null", "string"], "default": None}
    assert fields["at"]["type"][1] == {"type": "long", "logicalType": "timestamp-micros"}
    assert fields["inner"]["type"][1]["name"] == "inner"


def test_rows_encode_and_read_back() -> None:
    text = json.dumps(derive_avro(TYPE, "shop.Order"))
    encoded = AvroRowEncoder(text).encode(pa.array(ROWS, TYPE))
    assert encoded.null_count == 1
    data, starts, ends = binary_parts(encoded)
    reading = Reading(data, ends)
    schema = parse_avro(text)
    rows = np.array([0, 2])
    back, _ = compile_decoder(schema, schema)(reading, starts[rows], rows)
    assert not reading.errors.any()
    assert back.to_pylist() == [ROWS[0], ROWS[2]]
    # a reader other than ours: fastavro reads the same bytes
    parsed = fastavro.parse_schema(json.loads(text))
    first = fastavro.schemaless_reader(io.BytesIO(encoded[0].as_py()), parsed)
    assert first["id"] == 1 and first["amount"] == decimal.Decimal("12.34")
    assert first["at"] == ROWS[0]["at"] and first["scores"] == {"s": 0.5}


def test_a_registered_schema_takes_fields_by_name_defaults_and_union_members() -> None:
    registered = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "u", "type": ["null", "int", "string"]},
            {"name": "extra", "type": "string", "default": "d"},
            {"name": "id", "type": "long"},
        ],
    }
    column = pa.array(
        [{"ID": 5, "u": {"member0": None, "member1": "s"}}],
        pa.struct(
            [
                ("ID", pa.int64()),
                ("u", pa.struct([("member0", pa.int32()), ("member1", pa.string())])),
            ]
        ),
    )
    encoded = AvroRowEncoder(json.dumps(registered)).encode(column)
    assert encoded.to_pylist() == [b"\x04\x02s\x02d\x0a"]


def test_a_row_that_does_not_fit_names_its_row() -> None:
    registered = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    column = pa.array([{"id": 1}, {"id": None}], pa.struct([("id", pa.int64())]))
    with pytest.raises(RecordFormatError, match="row 1 of the chunk"):
        AvroRowEncoder(json.dumps(registered)).encode(column)
