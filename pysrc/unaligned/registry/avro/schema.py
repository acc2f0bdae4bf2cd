"""Avro schemas: parsed into a tree of named types, and mapped to Spark types as Spark's
``from_avro`` maps them (``SchemaConverters.toSqlType``).

:func:`parse_avro` reads a schema's JSON (named types resolved with Avro's namespace rules;
``referenced`` are the schemas it references, Confluent's schema references, parsed first into
the same names). :func:`spark_type` gives the Spark type and nullability:

=====================================  ==============================================
Avro                                   Spark
=====================================  ==============================================
null                                   null
boolean, int, long, float, double      boolean, int, bigint, float, double
int ``date``                           date
long ``timestamp-millis/micros``       timestamp (``local-timestamp-*``: timestamp_ntz)
string (``uuid`` too), enum            string
bytes, fixed                           binary (``decimal``: decimal(precision, scale))
record                                 struct (a field is nullable iff its type is)
array, map                             array, map<string, ...>
union [null, T]                        T, nullable
union [int, long] / [float, double]    bigint / double
any other union                        struct<member0, member1, ...> (each nullable)
=====================================  ==============================================

Pure Python and pyspark types: the driver maps the reader schema when the query starts without
importing numpy, pyarrow or fastavro.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from unaligned.errors import RecordFormatError

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


@dataclass(frozen=True, eq=False)
class Primitive:
    name: str  # one of PRIMITIVES
    logical: str | None = None
    precision: int = 0
    scale: int = 0


@dataclass(frozen=True, eq=False)
class Fixed:
    name: str
    size: int
    logical: str | None = None
    precision: int = 0
    scale: int = 0
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Enum:
    name: str
    symbols: tuple[str, ...]
    default: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Array:
    items: AvroType


@dataclass(frozen=True, eq=False)
class Map:
    values: AvroType


@dataclass(frozen=True, eq=False)
class Union_:
    branches: tuple[AvroType, ...]


@dataclass(frozen=True, eq=False)
class Field:
    name: str
    type: AvroType
    has_default: bool
    default: Any
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class Record:
    """Mutable only while parsing (a record may refer to itself)."""

    name: str
    fields: list[Field] = field(default_factory=list)
    aliases: tuple[str, ...] = ()


AvroType: TypeAlias = Primitive | Fixed | Enum | Array | Map | Union_ | Record


def short_name(full: str) -> str:
    return full.rsplit(".", 1)[-1]


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, AvroType] = {}

    def full_name(self, name: str, namespace: str | None) -> str:
        if "." in name or not namespace:
            return name
        return f"{namespace}.{name}"

    def parse(self, raw: Any, namespace: str | None) -> AvroType:
        if isinstance(raw, str):
            if raw in PRIMITIVES:
                return Primitive(raw)
            for candidate in (self.full_name(raw, namespace), raw):
                if candidate in self.names:
                    return self.names[candidate]
            raise ValueError(f"unknown type name {raw!r}")
        if isinstance(raw, list):
            return Union_(tuple(self.parse(b, namespace) for b in raw))
        if not isinstance(raw, dict) or "type" not in raw:
            raise ValueError(f"not an Avro schema: {json.dumps(raw)[:200]}")
        kind = raw["type"]
        logical = raw.get("logicalType")
        if kind in PRIMITIVES:
            return Primitive(kind, logical, int(raw.get("precision", 0)), int(raw.get("scale", 0)))
        if kind in ("record", "error", "enum", "fixed"):
            space = raw.get("namespace", namespace)
            name = self.full_name(str(raw["name"]), space)
            space = name.rsplit(".", 1)[0] if "." in name else None
            aliases = tuple(self.full_name(str(a), space) for a in raw.get("aliases", ()))
            if kind == "fixed":
                made: AvroType = Fixed(
                    name,
                    int(raw["size"]),
                    logical,
                    int(raw.get("precision", 0)),
                    int(raw.get("scale", 0)),
                    aliases,
                )
            elif kind == "enum":
                made = Enum(name, tuple(map(str, raw["symbols"])), raw.get("default"), aliases)
            else:
                made = Record(name, [], aliases)
            self.names[name] = made
            if isinstance(made, Record):
                for f in raw["fields"]:
                    made.fields.append(
                        Field(
                            str(f["name"]),
                            self.parse(f["type"], space),
                            "default" in f,
                            f.get("default"),
                            tuple(map(str, f.get("aliases", ()))),
                        )
                    )
            return made
        if kind == "array":
            return Array(self.parse(raw["items"], namespace))
        if kind == "map":
            return Map(self.parse(raw["values"], namespace))
        return self.parse(kind, namespace)  # {"type": "some.Named"} or {"type": {...}}


def parse_avro(text: str, referenced: Sequence[str] = ()) -> AvroType:
    """The schema in ``text``; ``referenced``: the texts of the schemas it references, in an
    order where each comes after those it references. Raises :class:`RecordFormatError`."""
    parser = _Parser()
    try:
        for ref in referenced:
            parser.parse(json.loads(ref), None)
        return parser.parse(json.loads(text), None)
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordFormatError(f"cannot parse the Avro schema: {exc}") from None


def type_name(t: AvroType) -> str:
    """The name Avro gives the type (a named type's full name, else its kind)."""
    if isinstance(t, (Record, Enum, Fixed)):
        return t.name
    if isinstance(t, Primitive):
        return t.name
    return {Array: "array", Map: "map", Union_: "union"}[type(t)]


def is_decimal(t: AvroType) -> bool:
    return (
        isinstance(t, (Primitive, Fixed))
        and t.logical == "decimal"
        and (isinstance(t, Fixed) or t.name == "bytes")
        and 0 < t.precision <= 38
        and 0 <= t.scale <= t.precision
    )


def spark_type(t: AvroType, path: str = "value") -> tuple[DataType, bool]:
    """(Spark type, nullable) of ``t`` (module docstring). A recursive record is refused as
    Spark refuses it."""
    return _spark(t, path, ())


def _spark(t: AvroType, path: str, seen: tuple[str, ...]) -> tuple[DataType, bool]:
    if is_decimal(t):
        assert isinstance(t, (Primitive, Fixed))
        return DecimalType(t.precision, t.scale), False
    if isinstance(t, Primitive):
        if t.name == "int" and t.logical == "date":
            return DateType(), False
        if t.name == "long" and t.logical in ("timestamp-millis", "timestamp-micros"):
            return TimestampType(), False
        if t.name == "long" and t.logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return TimestampNTZType(), False
        simple: Mapping[str, DataType] = {
            "null": NullType(),
            "boolean": BooleanType(),
            "int": IntegerType(),
            "long": LongType(),
            "float": FloatType(),
            "double": DoubleType(),
            "bytes": BinaryType(),
            "string": StringType(),
        }
        return simple[t.name], t.name == "null"
    if isinstance(t, Fixed):
        return BinaryType(), False
    if isinstance(t, Enum):
        return StringType(), False
    if isinstance(t, Array):
        item, nullable = _spark(t.items, f"{path}[]", seen)
        return ArrayType(item, nullable), False
    if isinstance(t, Map):
        item, nullable = _spark(t.values, f"{path}{{}}", seen)
        return MapType(StringType(), item, nullable), False
    if isinstance(t, Record):
        if t.name in seen:
            raise RecordFormatError(
                f"the Avro schema is recursive at {path} (record {t.name}): Spark types cannot "
                "hold it"
            )
        fields = []
        for f in t.fields:
            data_type, nullable = _spark(f.type, f"{path}.{f.name}", (*seen, t.name))
            fields.append(StructField(f.name, data_type, nullable))
        return StructType(fields), False
    assert isinstance(t, Union_)
    has_null = any(isinstance(b, Primitive) and b.name == "null" for b in t.branches)
    rest = [b for b in t.branches if not (isinstance(b, Primitive) and b.name == "null")]
    if not rest:
        return NullType(), True
    if len(rest) == 1:
        data_type, nullable = _spark(rest[0], path, seen)
        return data_type, nullable or has_null
    kinds = {b.name for b in rest if isinstance(b, Primitive) and b.logical is None}
    if len(rest) == 2 and kinds in ({"int", "long"}, {"float", "double"}):
        return (LongType() if "long" in kinds else DoubleType()), has_null
    members = []
    for i, branch in enumerate(rest):
        data_type, _ = _spark(branch, f"{path}.member{i}", seen)
        members.append(StructField(f"member{i}", data_type, True))
    return StructType(members), has_null
