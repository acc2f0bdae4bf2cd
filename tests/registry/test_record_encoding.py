"""The sink's encoding of a column: one writer schema per topic, the dead-letter bytes, and the
checks on them. The writer schemas are given (registry behaviour: the integration tests)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from unaligned.errors import SchemaMismatchError
from unaligned.registry import record_encoding
from unaligned.registry.avro.encoder import AvroRowEncoder
from unaligned.registry.connection.client import RegisteredSchema
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.options import (
    ColumnFormat,
    Format,
    RecordFormats,
    RegistryConfig,
    SchemaChoice,
)
from unaligned.registry.record_encoding import WriterSchema, encode_column

SCHEMA = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}
FORMATS = RecordFormats(
    RegistryConfig(urls=("http://127.0.0.1:1",)),
    ColumnFormat("value", Format.AVRO, SchemaChoice()),
    None,
)
TYPE = pa.struct([pa.field("x", pa.int32(), False)])


@pytest.fixture
def schema_per_topic(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Writer schema id = 100 + the topic's length; the topics asked for, in order."""
    asked: list[str] = []

    def writer(formats: Any, column: Any, topic: str, arrow_type: Any) -> WriterSchema:
        asked.append(topic)
        schema = RegisteredSchema(100 + len(topic), "AVRO", json.dumps(SCHEMA))
        return WriterSchema(ResolvedSchema(schema), AvroRowEncoder(json.dumps(SCHEMA)), b"")

    monkeypatch.setattr(record_encoding, "writer_schema", writer)
    return asked


def test_each_topic_gets_its_schema_id_and_null_values_stay_tombstones(
    schema_per_topic: list[str],
) -> None:
    values = pa.array([{"x": 1}, {"x": 2}, None, {"x": 3}], TYPE)
    topics = pa.array(["a", "bb", "a", "a"])
    out = encode_column(FORMATS, FORMATS.columns[0], values, None, topics).to_pylist()
    assert out == [
        b"\x00\x00\x00\x00\x65\x02",
        b"\x00\x00\x00\x00\x66\x04",
        None,
        b"\x00\x00\x00\x00\x65\x06",
    ]
    assert sorted(schema_per_topic) == ["a", "bb"]


def test_raw_bytes_are_written_for_rows_without_a_value(schema_per_topic: list[str]) -> None:
    values = pa.array([{"x": 1}, None, None], TYPE)
    raw = pa.array([None, b"poison", None], pa.binary())
    out = encode_column(FORMATS, FORMATS.columns[0], values, raw, "t").to_pylist()
    assert out == [b"\x00\x00\x00\x00\x65\x02", b"poison", None]


def test_a_row_with_both_a_value_and_raw_bytes_is_refused(schema_per_topic: list[str]) -> None:
    values = pa.array([{"x": 1}], TYPE)
    with pytest.raises(SchemaMismatchError, match="row 0 of the chunk has both 'value' and"):
        encode_column(FORMATS, FORMATS.columns[0], values, pa.array([b"x"]), "t")
