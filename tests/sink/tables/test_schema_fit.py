"""Whether a table takes the query's columns: refused before data moves, naming the columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from unaligned.errors import TableSchemaError
from unaligned.sink.tables.schema_fit import columns_to_add, conform_rows

TABLE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("note", pa.string()),
    ]
)


def test_the_same_columns_in_other_spellings_fit() -> None:
    query = pa.schema(
        [
            pa.field("ID", pa.int32()),  # narrower, other case
            pa.field("name", pa.string()),
            pa.field("ts", pa.timestamp("us", tz="Europe/Paris")),
        ]
    )
    assert columns_to_add(TABLE, query, merge_schema=False, table="t") == []


def test_a_column_of_another_type_and_a_missing_one_are_named() -> None:
    query = pa.schema([pa.field("id", pa.string()), pa.field("extra", pa.int64())])
    with pytest.raises(TableSchemaError) as refused:
        columns_to_add(TABLE, query, merge_schema=False, table="Delta table /t")
    message = str(refused.value)
    assert "id (string into int64)" in message
    assert "column(s) the table lacks: extra" in message
    assert "mergeSchema" in message


def test_merge_schema_adds_missing_columns_as_nullable() -> None:
    query = pa.schema([pa.field("id", pa.int64()), pa.field("extra", pa.int64(), nullable=False)])
    added = columns_to_add(TABLE, query, merge_schema=True, table="t")
    assert added == [pa.field("extra", pa.int64(), nullable=True)]


def test_a_required_table_column_the_query_lacks_is_refused() -> None:
    with pytest.raises(TableSchemaError, match="required table column.*id"):
        columns_to_add(
            TABLE, pa.schema([pa.field("name", pa.string())]), merge_schema=True, table="t"
        )


def test_conform_fills_missing_columns_and_refuses_a_null_in_a_required_one() -> None:
    rows = pa.record_batch({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]})
    conformed = conform_rows(rows, TABLE, "t")
    assert conformed.schema.names == ["id", "name", "ts", "note"]
    assert conformed.column("id").type == pa.int64()
    assert conformed.column("note").null_count == 2
    with pytest.raises(TableSchemaError, match="column id is required"):
        conform_rows(pa.record_batch({"id": pa.array([1, None])}), TABLE, "t")
