"""Whether a table's schema takes the query's columns: checked in Spark's planner, before data
moves, for the Iceberg and Delta sinks alike.

Columns match by name, ignoring case (as Spark and Delta do). A query column must exist in the
table with the same type, or a wider one the writer casts to without loss (a smaller integer
into a larger, ``float`` into ``double``; the Arrow ``large_`` and ``string`` spellings and any
timestamp time zone count as the same). A table column the query lacks must be nullable
(written as nulls). A query column that the table lacks is refused, naming it, unless
``mergeSchema`` is set: it is then added to the table as a nullable column before the first file
is written (:func:`columns_to_add`). A nullable query column into a required table column is
allowed: the task refuses a null row it meets (:func:`check_required`), as Delta's writer does.
"""

from __future__ import annotations

import pyarrow as pa

from unaligned.errors import TableSchemaError

_WIDER = {
    "int8": ("int16", "int32", "int64"),
    "int16": ("int32", "int64"),
    "int32": ("int64",),
    "float": ("double",),
}


def normalized_type(data_type: pa.DataType) -> str:
    """A type's spelling with Arrow's large/small and time-zone differences removed."""
    if pa.types.is_timestamp(data_type):
        return f"timestamp[{data_type.unit}{', tz' if data_type.tz else ''}]"
    text = str(data_type)
    for large, small in (("large_string", "string"), ("large_binary", "binary")):
        text = text.replace(large, small)
    text = text.replace("large_list", "list").replace("string_view", "string")
    return text.replace(" not null", "")


def _fits(column: pa.DataType, table: pa.DataType) -> bool:
    have, want = normalized_type(column), normalized_type(table)
    return have == want or want in _WIDER.get(have, ())


def columns_to_add(
    table_schema: pa.Schema, query_schema: pa.Schema, *, merge_schema: bool, table: str
) -> list[pa.Field]:
    """The query columns the table lacks (nullable, to add with ``mergeSchema``); raises
    :class:`TableSchemaError` naming every column that does not fit."""
    by_name = {f.name.lower(): f for f in table_schema}
    wrong_type: list[str] = []
    missing: list[pa.Field] = []
    for field in query_schema:
        target = by_name.get(field.name.lower())
        if target is None:
            missing.append(pa.field(field.name, field.type, nullable=True))
        elif not _fits(field.type, target.type):
            wrong_type.append(
                f"{field.name} ({normalized_type(field.type)} into {normalized_type(target.type)})"
            )
    query_names = {f.name.lower() for f in query_schema}
    required = [
        f.name for f in table_schema if f.name.lower() not in query_names and not f.nullable
    ]
    problems = []
    if wrong_type:
        problems.append("column(s) of another type: " + ", ".join(wrong_type))
    if missing and not merge_schema:
        problems.append(
            "column(s) the table lacks: "
            + ", ".join(f.name for f in missing)
            + " (option mergeSchema=true adds them as nullable columns)"
        )
    if required:
        problems.append("required table column(s) the query lacks: " + ", ".join(required))
    if problems:
        raise TableSchemaError(
            f"{table} does not take the query's columns: {'; '.join(problems)}. Nothing was "
            "written; select or cast the columns to fit, or write to another table"
        )
    return missing if merge_schema else []


def check_required(rows: pa.Table, schema: pa.Schema, table: str) -> None:
    """Refuse rows with a null in a required column of ``schema`` (before any file holds them)."""
    for field in schema:
        if not field.nullable and field.name in rows.column_names:
            if rows.column(field.name).null_count:
                raise TableSchemaError(
                    f"{table}: column {field.name} is required, but a row of this batch holds "
                    "a null; nothing of the batch was committed"
                )


def conform_rows(chunk: pa.RecordBatch | pa.Table, schema: pa.Schema, table: str) -> pa.Table:
    """``chunk`` with exactly ``schema``'s columns, in its order and types (field metadata
    kept); a column the chunk lacks becomes nulls (the planner checked it is nullable)."""
    columns = {name.lower(): i for i, name in enumerate(chunk.schema.names)}
    arrays = []
    for field in schema:
        index = columns.get(field.name.lower())
        if index is None:
            arrays.append(pa.nulls(chunk.num_rows, field.type))
            continue
        column = chunk.column(index)
        arrays.append(column if column.type == field.type else column.cast(field.type))
    rows = pa.Table.from_arrays(arrays, schema=schema.with_metadata(None))
    check_required(rows, schema, table)
    return rows
