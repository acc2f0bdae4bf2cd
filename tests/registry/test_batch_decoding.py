"""A read task's batches decoded: the added columns, each mode, tombstones and unknown ids.
The schemas are given as resolved (no registry); an id the process does not know is asked of
a registry that is not there."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import pyarrow as pa
import pytest

from avro_payloads import payloads
from unaligned.errors import RecordFormatError, SchemaRegistryError
from unaligned.kafka.records.source_schema import kafka_source_schema
from unaligned.registry.connection.client import RegisteredSchema
from unaligned.registry.connection.schemas import ColumnReading, ResolvedSchema
from unaligned.registry.options import (
    ColumnFormat,
    DecodeMode,
    Format,
    RecordFormats,
    RegistryConfig,
    SchemaChoice,
)
from unaligned.registry.record_decoding import RecordDecoding

SCHEMA = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def decoding(mode: DecodeMode) -> RecordDecoding:
    registry = RegistryConfig(urls=(f"http://127.0.0.1:{closed_port()}",), attempts=1)
    formats = RecordFormats(
        registry, ColumnFormat("value", Format.AVRO, SchemaChoice()), None, mode=mode
    )
    reader = ResolvedSchema(RegisteredSchema(11, "AVRO", json.dumps(SCHEMA), subject="t-value"))
    return RecordDecoding(formats, (ColumnReading(formats.columns[0], reader),))


def kafka_batch(values: list[bytes | None]) -> pa.RecordBatch:
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(kafka_source_schema(False), timezone="UTC")
    n = len(values)
    columns: dict[str, Any] = {
        "key": [None] * n,
        "value": values,
        "topic": ["t"] * n,
        "partition": [3] * n,
        "offset": list(range(100, 100 + n)),
        "timestamp": [0] * n,
        "timestampType": [0] * n,
    }
    return pa.RecordBatch.from_pydict(columns, schema=schema)


def framed(schema_id: int, x: int) -> bytes:
    return b"\0" + struct.pack(">I", schema_id) + payloads(SCHEMA, [{"x": x}])[0]


def decode(mode: DecodeMode, values: list[bytes | None]) -> pa.RecordBatch:
    source = decoding(mode)
    return next(iter(source.decode_all([kafka_batch(values)], kafka_source_schema(False))))


def test_records_decode_into_the_value_column_with_their_schema_id() -> None:
    batch = decode(DecodeMode.FAILFAST, [framed(11, 1), None, framed(11, 3)])
    assert batch.schema.names[-1] == "valueSchemaId"
    assert batch.column("value").to_pylist() == [{"x": 1}, None, {"x": 3}]
    assert batch.column("valueSchemaId").to_pylist() == [11, None, 11]


def test_failfast_names_the_record_and_the_way_out() -> None:
    with pytest.raises(RecordFormatError) as failed:
        decode(DecodeMode.FAILFAST, [framed(11, 1), b"plain text"])
    text = str(failed.value)
    assert "value of t-3 at offset 101 does not decode" in text
    assert "no Schema Registry framing" in text and "mode=PERMISSIVE" in text


def test_permissive_gives_the_reason_and_the_bytes() -> None:
    batch = decode(DecodeMode.PERMISSIVE, [framed(11, 1), b"plain text", framed(11, 2)[:-1]])
    assert batch.column("value").to_pylist() == [{"x": 1}, None, None]
    errors = batch.column("valueError").to_pylist()
    assert errors[0] is None and "framing" in errors[1] and errors[2]
    assert batch.column("valueRaw").to_pylist() == [None, b"plain text", framed(11, 2)[:-1]]


def test_an_unknown_id_needs_the_registry_and_its_absence_is_no_poison() -> None:
    """An id the query did not start with is asked of the registry; a registry that cannot be
    reached stops the task in either mode (the records are not bad)."""
    with pytest.raises(SchemaRegistryError, match="could not be reached"):
        decode(DecodeMode.PERMISSIVE, [framed(12, 1)])


def test_output_schema_adds_the_columns_after_kafkas() -> None:
    schema = decoding(DecodeMode.PERMISSIVE).output_schema(kafka_source_schema(True))
    assert schema.fieldNames()[-4:] == ["headers", "valueSchemaId", "valueError", "valueRaw"]
    assert schema["value"].dataType.simpleString() == "struct<x:int>"
