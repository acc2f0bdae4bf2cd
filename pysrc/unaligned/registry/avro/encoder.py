"""The sink's Avro: a schema derived from a column's type, and rows encoded with a schema.

:func:`derive_avro` maps an Arrow (Spark) type to an Avro schema as Spark's ``to_avro`` does
(struct -> record named after its field under the top record's namespace, array, map with
string keys, decimal -> bytes ``decimal``, timestamp -> ``timestamp-micros``, timestamp_ntz ->
``local-timestamp-micros``, date -> ``date``), with one difference that schema evolution needs:
a nullable field is the union ``["null", T]`` with ``"default": null`` (Spark writes
``[T, "null"]`` without a default, which a registry's BACKWARD check cannot evolve).

:class:`AvroRowEncoder` encodes the rows of a column with a writer schema (derived, or
registered by someone else): struct fields matched to record fields by name, a missing field
takes its default, a Spark ``member0``/``member1``... struct goes to the union branch that is
set. Encoding is fastavro's, row by row (the sink's cost is dominated by Kafka, not this).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from unaligned.errors import RecordFormatError
from unaligned.registry.avro import vectors as av
from unaligned.registry.avro.schema import (
    Array,
    AvroType,
    Enum,
    Fixed,
    Map,
    Primitive,
    Record,
    Union_,
    parse_avro,
)


def derive_avro(arrow_type: pa.DataType, name: str = "topLevelRecord") -> Any:
    """The Avro schema (JSON value) for a column of ``arrow_type`` (module docstring)."""
    namespace, _, short = name.rpartition(".")
    schema = _derive(arrow_type, short, namespace or None, top=True)
    return schema


def _derive(t: pa.DataType, name: str, namespace: str | None, top: bool = False) -> Any:
    types = pa.types
    if types.is_struct(t):
        fields = []
        inner = name if namespace is None or top else f"{namespace}.{name}"
        for f in t:
            field_type = _derive(f.type, f.name, inner if not top else name)
            entry: dict[str, Any] = {"name": f.name, "type": field_type}
            if f.nullable:
                entry = {"name": f.name, "type": ["null", field_type], "default": None}
            fields.append(entry)
        record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            record["namespace"] = namespace
        return record
    if types.is_list(t) or types.is_large_list(t):
        item = _derive(t.value_type, name, namespace)
        return {"type": "array", "items": ["null", item] if t.value_field.nullable else item}
    if types.is_map(t):
        if not types.is_string(t.key_type):
            raise RecordFormatError(f"Avro maps have string keys; column {name!r} has {t}")
        value = _derive(t.item_type, name, namespace)
        return {"type": "map", "values": ["null", value] if t.item_field.nullable else value}
    if types.is_decimal(t):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if types.is_timestamp(t):
        logical = "timestamp-micros" if t.tz is not None else "local-timestamp-micros"
        return {"type": "long", "logicalType": logical}
    if types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    simple = [
        (types.is_boolean, "boolean"),
        (lambda x: types.is_int8(x) or types.is_int16(x) or types.is_int32(x), "int"),
        (types.is_int64, "long"),
        (types.is_float32, "float"),
        (types.is_float64, "double"),
        (lambda x: types.is_string(x) or types.is_large_string(x), "string"),
        (lambda x: types.is_binary(x) or types.is_large_binary(x), "bytes"),
        (types.is_null, "null"),
    ]
    for check, avro in simple:
        if check(t):
            return avro
    raise RecordFormatError(f"column {name!r} has type {t}, which has no Avro type")


def record_name(schema: AvroType) -> str:
    """The full name a record naming strategy uses (a non-record schema: its type name)."""
    if isinstance(schema, (Record, Enum, Fixed)):
        return schema.name
    return schema.name if isinstance(schema, Primitive) else type(schema).__name__.lower()


class AvroRowEncoder:
    """Rows of a column encoded with one Avro writer schema (module docstring)."""

    def __init__(self, text: str, referenced: Sequence[str] = ()) -> None:
        named: dict[str, Any] = {}
        for ref in referenced:
            fastavro.parse_schema(_json(ref), named_schemas=named)
        self._parsed = fastavro.parse_schema(_json(text), named_schemas=named)
        self._schema = parse_avro(text, referenced)

    def encode(self, column: pa.Array) -> pa.Array:
        """Each row's Avro bytes (a null row stays null). Raises :class:`RecordFormatError`
        naming the row that does not fit the schema."""
        rows = column.to_pylist()
        out = io.BytesIO()
        ends = np.zeros(len(rows) + 1, np.int64)
        valid = np.ones(len(rows), bool)
        for i, row in enumerate(rows):
            if row is None:
                valid[i] = False
            else:
                try:
                    fastavro.schemaless_writer(out, self._parsed, _for_avro(self._schema, row))
                except (TypeError, ValueError, KeyError, AttributeError) as exc:
                    raise RecordFormatError(
                        f"row {i} of the chunk does not fit the Avro schema: {exc!r}"
                    ) from None
            ends[i + 1] = out.tell()
        data = np.frombuffer(out.getvalue() or b"\0", np.uint8)
        return av.binary_array(data, ends.astype(np.int32), pa.binary(), valid)


def _json(text: str) -> Any:
    import json

    return json.loads(text)


def _for_avro(t: AvroType, value: Any) -> Any:
    """A Python value from Arrow's ``to_pylist`` in the shape fastavro writes for ``t``."""
    if value is None:
        return None
    if isinstance(t, Record):
        given = {k.lower(): v for k, v in value.items()} if isinstance(value, dict) else {}
        out = {}
        for f in t.fields:
            if f.name.lower() in given:
                out[f.name] = _for_avro(f.type, given[f.name.lower()])
            elif f.has_default:
                out[f.name] = f.default
        return out
    if isinstance(t, Union_):
        rest = [b for b in t.branches if not (isinstance(b, Primitive) and b.name == "null")]
        if len(rest) == 1:
            return _for_avro(rest[0], value)
        if isinstance(value, dict) and any(k.startswith("member") for k in value):
            for i, branch in enumerate(rest):
                member = value.get(f"member{i}")
                if member is not None:
                    return (_branch_name(branch), _for_avro(branch, member))
            return None
        return value
    if isinstance(t, Array):
        return [_for_avro(t.items, v) for v in value]
    if isinstance(t, Map):
        items = value.items() if isinstance(value, dict) else value
        return {k: _for_avro(t.values, v) for k, v in items}
    return value


def _branch_name(t: AvroType) -> str:
    if isinstance(t, (Record, Enum, Fixed)):
        return t.name
    if isinstance(t, Primitive):
        return t.name
    return "array" if isinstance(t, Array) else "map"
