"""A proto3 schema, as ``.proto`` text, for a column's Arrow (Spark) type: what the sink
registers for ``protobuf-confluent`` when no registered schema is named.

A struct becomes a message (nested structs nested messages named ``<Field>Message``), fields
numbered 1, 2, ... in column order; a nullable scalar is ``optional``, an array ``repeated``, a
map ``map<K, V>``, a timestamp ``google.protobuf.Timestamp``; the package is the dotted name's
prefix. Types Protobuf has no counterpart for here (dates, decimals, nulls) are refused naming
the column.
"""

from __future__ import annotations

import pyarrow as pa

from unaligned.errors import RecordFormatError


def derive_proto(arrow_type: pa.DataType, name: str) -> str:
    """A proto3 schema for a column of ``arrow_type`` (a struct): message ``name`` (its
    package from a dotted name), a nested message per struct field, ``optional`` for a
    nullable scalar, ``repeated`` for an array, ``map`` for a map, Timestamp for timestamps."""
    if not pa.types.is_struct(arrow_type):
        raise RecordFormatError(f"protobuf-confluent writes a struct column, not {arrow_type}")
    package, _, short = name.rpartition(".")
    lines = ['syntax = "proto3";']
    if package:
        lines.append(f"package {package};")
    body = _message_text(arrow_type, short, "")
    if "google.protobuf.Timestamp" in body:
        lines.append('import "google/protobuf/timestamp.proto";')
    return "\n".join([*lines, body, ""])


def _message_text(t: pa.DataType, name: str, indent: str) -> str:
    lines = [f"{indent}message {name} {{"]
    for number, field in enumerate(t, 1):
        kind, nested = _proto_type(field.type, field.name, indent + "  ")
        lines += nested
        ft = field.type
        if pa.types.is_list(ft) or pa.types.is_large_list(ft):
            lines.append(f"{indent}  repeated {kind} {field.name} = {number};")
        elif pa.types.is_map(ft):
            lines.append(f"{indent}  {kind} {field.name} = {number};")
        elif field.nullable and not pa.types.is_struct(ft) and not pa.types.is_timestamp(ft):
            lines.append(f"{indent}  optional {kind} {field.name} = {number};")
        else:
            lines.append(f"{indent}  {kind} {field.name} = {number};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _proto_type(t: pa.DataType, name: str, indent: str) -> tuple[str, list[str]]:
    types = pa.types
    if types.is_list(t) or types.is_large_list(t):
        return _proto_type(t.value_type, name, indent)
    if types.is_map(t):
        value, nested = _proto_type(t.item_type, name, indent)
        key, _ = _proto_type(t.key_type, name, indent)
        return f"map<{key}, {value}>", nested
    if types.is_struct(t):
        message = name[:1].upper() + name[1:] + "Message"
        return message, [_message_text(t, message, indent)]
    simple = [
        (types.is_boolean, "bool"),
        (lambda x: types.is_int8(x) or types.is_int16(x) or types.is_int32(x), "int32"),
        (types.is_int64, "int64"),
        (types.is_float32, "float"),
        (types.is_float64, "double"),
        (lambda x: types.is_string(x) or types.is_large_string(x), "string"),
        (lambda x: types.is_binary(x) or types.is_large_binary(x), "bytes"),
        (types.is_timestamp, "google.protobuf.Timestamp"),
    ]
    for check, proto in simple:
        if check(t):
            return proto, []
    if types.is_decimal(t) or types.is_date(t):
        raise RecordFormatError(
            f"column {name!r} has type {t}: the sink derives no Protobuf type for decimals and "
            "dates (proto3 has none; Confluent's confluent.type.Decimal and google.type.Date "
            "are not written). Cast it to a string (exact) or a double/int before writing, or "
            "write the column with avro-confluent or json-schema-confluent, which keep it"
        )
    raise RecordFormatError(f"column {name!r} has type {t}, which has no Protobuf type here")
