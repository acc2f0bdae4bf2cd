"""JSON Schema (``json-schema-confluent``): the schema mapped to Spark types, records decoded into
them, and rows encoded as JSON checked against the writer's schema.

Mapping (:func:`json_spark_type`): ``object`` with ``properties`` -> struct (properties in their
order, every field nullable: JSON may leave any out); ``object`` with only
``additionalProperties`` -> map<string, ...>; ``array`` -> array; ``string`` -> string
(``format`` ``date`` -> date, ``date-time`` -> timestamp, ``contentEncoding`` ``base64`` ->
binary); ``integer`` -> bigint; ``number`` -> double; ``boolean``; ``enum``/``const`` -> string;
a type list or ``oneOf``/``anyOf`` of ``null`` and one type -> that type; anything else (several
types) -> string holding the value's JSON text. ``$ref`` to ``#/definitions/...`` or
``#/$defs/...`` and to referenced schemas (by the reference's name) are followed.

Records are decoded row by row (``json.loads``, then each value checked against the Spark type:
a value of another JSON type makes the record fail, as the ``mode`` says). Writing
(:class:`JsonRowEncoder`) validates every row against the writer's schema with the
``jsonschema`` package (``pip install 'unaligned[json-schema]'``); :func:`derive_json_schema`
derives a schema from a column's type.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from unaligned.errors import MissingExtraError, RecordFormatError
from unaligned.registry.avro import vectors as av
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.framing import Frames

EXTRA = "pip install 'unaligned[json-schema]'"


# --- JSON Schema -> Spark ---------------------------------------------------------------------


class _Mapper:
    def __init__(self, root: Mapping[str, Any], referenced: Mapping[str, Any]) -> None:
        self.root = root
        self.referenced = referenced

    def resolve(self, node: Any, seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        while isinstance(node, dict) and "$ref" in node:
            ref = str(node["$ref"])
            if ref in seen:
                raise RecordFormatError(f"the JSON Schema is recursive at {ref!r}")
            seen = (*seen, ref)
            doc_name, _, pointer = ref.partition("#")
            doc: Any = self.root if not doc_name else self.referenced.get(doc_name)
            if doc is None:
                raise RecordFormatError(
                    f"the JSON Schema refers to {ref!r}, which it does not hold"
                )
            for part in [p for p in pointer.split("/") if p]:
                doc = doc[part.replace("~1", "/").replace("~0", "~")]
            node = doc
        return node, seen

    def spark(self, node: Any, seen: tuple[str, ...] = ()) -> DataType:
        node, seen = self.resolve(node, seen)
        if node is True or node == {}:
            return StringType()
        if not isinstance(node, dict):
            raise RecordFormatError(f"not a JSON Schema: {json.dumps(node)[:200]}")
        for key in ("oneOf", "anyOf"):
            if key in node:
                options = [self.resolve(o, seen)[0] for o in node[key]]
                rest = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
                return self.spark(rest[0], seen) if len(rest) == 1 else StringType()
        if "enum" in node or "const" in node:
            return StringType()
        kind = node.get("type")
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            if len(rest) != 1:
                return NullType() if not rest else StringType()
            kind = rest[0]
        if kind is None and "properties" in node:
            kind = "object"
        if kind == "object":
            props = node.get("properties")
            extra = node.get("additionalProperties")
            if not props and isinstance(extra, dict):
                return MapType(StringType(), self.spark(extra, seen), True)
            return StructType(
                [
                    StructField(name, self.spark(sub, seen), True)
                    for name, sub in (props or {}).items()
                ]
            )
        if kind == "array":
            return ArrayType(self.spark(node.get("items", {}), seen), True)
        if kind == "string":
            fmt = node.get("format")
            if fmt == "date":
                return DateType()
            if fmt == "date-time":
                return TimestampType()
            return BinaryType() if node.get("contentEncoding") == "base64" else StringType()
        simple = {"integer": LongType(), "number": DoubleType(), "boolean": BooleanType()}
        if kind == "null":
            return NullType()
        return simple.get(str(kind), StringType())


def _documents(resolved: ResolvedSchema) -> tuple[Any, dict[str, Any]]:
    try:
        root = json.loads(resolved.schema.text)
        referenced = {name: json.loads(s.text) for name, s in resolved.referenced}
    except ValueError as exc:
        raise RecordFormatError(f"cannot parse the JSON Schema: {exc}") from None
    return root, referenced


def json_spark_type(resolved: ResolvedSchema) -> DataType:
    root, referenced = _documents(resolved)
    return _Mapper(root, referenced).spark(root)


# --- decoding ---------------------------------------------------------------------------------


def _to_spark(value: Any, t: DataType, path: str) -> Any:
    """``value`` (from ``json.loads``) as ``pa.array`` takes it for ``t``; raises ValueError."""
    if value is None or isinstance(t, NullType):
        return None
    if isinstance(t, StructType):
        if not isinstance(value, dict):
            raise ValueError(f"{path} is {type(value).__name__}, not an object")
        return {f.name: _to_spark(value.get(f.name), f.dataType, f"{path}.{f.name}") for f in t}
    if isinstance(t, ArrayType):
        if not isinstance(value, list):
            raise ValueError(f"{path} is {type(value).__name__}, not an array")
        return [_to_spark(v, t.elementType, f"{path}[]") for v in value]
    if isinstance(t, MapType):
        if not isinstance(value, dict):
            raise ValueError(f"{path} is {type(value).__name__}, not an object")
        return [(k, _to_spark(v, t.valueType, f"{path}.{k}")) for k, v in value.items()]
    if isinstance(t, StringType):
        return value if isinstance(value, str) else json.dumps(value)
    if isinstance(t, BooleanType):
        if not isinstance(value, bool):
            raise ValueError(f"{path} is {type(value).__name__}, not a boolean")
        return value
    if isinstance(t, LongType):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path} is {type(value).__name__}, not an integer")
        return value
    if isinstance(t, DoubleType):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path} is {type(value).__name__}, not a number")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{path} is {type(value).__name__}, not a string")
    if isinstance(t, DateType):
        return datetime.date.fromisoformat(value)
    if isinstance(t, TimestampType):
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
    return base64.b64decode(value, validate=True)  # BinaryType


class JsonColumnDecoder:
    """JSON records read into the reader schema's Spark type (every writer id alike: JSON
    carries its field names)."""

    def __init__(self, reader: ResolvedSchema) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self._type = json_spark_type(reader)
        self._arrow = to_arrow_type(self._type, timezone="UTC")

    def decode(self, reading: av.Reading, frames: Frames, rows: np.ndarray) -> pa.Array:
        values: list[Any] = []
        for row, start, end in zip(
            rows.tolist(), frames.starts[rows].tolist(), frames.ends[rows].tolist(), strict=True
        ):
            try:
                parsed = json.loads(frames.data[start:end].tobytes())
                values.append(_to_spark(parsed, self._type, "$"))
            except (ValueError, TypeError) as exc:
                reading.fail_with(np.array([row]), f"not JSON of the reader's schema: {exc}")
                values.append(None)
        return av.checked_array(values, self._arrow, reading, rows)


# --- encoding ---------------------------------------------------------------------------------


def _jsonable(value: Any, t: pa.DataType) -> Any:
    """A value from Arrow's ``to_pylist`` of type ``t`` as JSON takes it."""
    if value is None:
        return None
    types = pa.types
    if types.is_struct(t):
        return {f.name: _jsonable(value.get(f.name), f.type) for f in t}
    if types.is_map(t):
        return {str(k): _jsonable(v, t.item_type) for k, v in value}
    if types.is_list(t) or types.is_large_list(t):
        return [_jsonable(v, t.value_type) for v in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return value  # written with every digit (:func:`_dumps`), validated as a number
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _validator(schema: Any) -> Any:
    try:
        import jsonschema
    except ImportError:
        raise MissingExtraError(
            f"writing json-schema-confluent validates each record with the jsonschema package: "
            f"{EXTRA}"
        ) from None
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


class JsonRowEncoder:
    """Rows as compact JSON, each validated against the writer's schema first."""

    def __init__(self, text: str) -> None:
        self._validator = _validator(json.loads(text))

    @staticmethod
    def _dumps(document: Any) -> str:
        try:
            return json.dumps(document, separators=(",", ":"))
        except TypeError:  # a decimal: written exactly, as its digits
            return _exact_dumps(document)

    def encode(self, column: pa.Array) -> pa.Array:
        texts: list[bytes] = []
        valid = np.ones(len(column), bool)
        for i, row in enumerate(column.to_pylist()):
            if row is None:
                valid[i] = False
                texts.append(b"")
                continue
            document = _jsonable(row, column.type)
            error = next(iter(self._validator.iter_errors(document)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "the record"
                raise RecordFormatError(f"row {i} of the chunk, at {where}: {error.message}")
            texts.append(self._dumps(document).encode("utf-8"))
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum([len(t) for t in texts], out=offsets[1:])
        data = np.frombuffer(b"".join(texts) or b"\0", np.uint8)
        return av.binary_array(data, offsets.astype(np.int32), pa.binary(), valid)


def _exact_dumps(value: Any) -> str:
    """Compact JSON with every ``Decimal`` written as a number with all its digits (``json``
    would need a float, which keeps 17 significant digits)."""
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise RecordFormatError(f"{value} is not a JSON number")
        return str(value) if "E" not in str(value) else f"{value:f}"
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k))}:{_exact_dumps(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_exact_dumps(v) for v in value) + "]"
    return json.dumps(value)


def derive_json_schema(arrow_type: pa.DataType, name: str) -> dict[str, Any]:
    """A JSON Schema (draft-07) for a column of ``arrow_type``, titled ``name``."""
    schema = _derive(arrow_type)
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": name, **schema}
    return schema


def _derive(t: pa.DataType) -> dict[str, Any]:
    types = pa.types
    if types.is_struct(t):
        props = {}
        for f in t:
            sub = _derive(f.type)
            props[f.name] = {"oneOf": [{"type": "null"}, sub]} if f.nullable else sub
        required = [f.name for f in t if not f.nullable]
        out: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out
    if types.is_list(t) or types.is_large_list(t):
        item = _derive(t.value_type)
        nullable = t.value_field.nullable
        return {"type": "array", "items": {"oneOf": [{"type": "null"}, item]} if nullable else item}
    if types.is_map(t):
        value = _derive(t.item_type)
        return {"type": "object", "additionalProperties": {"oneOf": [{"type": "null"}, value]}}
    if types.is_timestamp(t):
        return {"type": "string", "format": "date-time"}
    if types.is_date32(t):
        return {"type": "string", "format": "date"}
    if types.is_binary(t) or types.is_large_binary(t):
        return {"type": "string", "contentEncoding": "base64"}
    if types.is_string(t) or types.is_large_string(t):
        return {"type": "string"}
    if types.is_boolean(t):
        return {"type": "boolean"}
    if types.is_integer(t):
        return {"type": "integer"}
    if types.is_floating(t) or types.is_decimal(t):
        return {"type": "number"}
    if types.is_null(t):
        return {"type": "null"}
    raise RecordFormatError(f"type {t} has no JSON Schema type")
