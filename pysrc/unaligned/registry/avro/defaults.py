"""Avro field defaults (Avro's JSON encoding of them) as length-1 Arrow arrays of the reader's
type: what a reader field the writer lacks reads as.

A union's default is of its first branch; ``bytes`` and ``fixed`` defaults are strings of code
points 0-255; a ``decimal`` default is such a string of its unscaled big-endian value.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pyarrow as pa

from unaligned.registry.avro.schema import (
    Array,
    AvroType,
    Fixed,
    Map,
    Primitive,
    Record,
    Union_,
    is_decimal,
)


class DefaultValueError(ValueError):
    """A field's default does not fit its type."""


def constant(t: AvroType, value: Any, out: pa.DataType, path: str) -> pa.Array:
    """A length-1 array holding a field's default (Avro's JSON encoding of defaults)."""
    try:
        return pa.array([_default_value(t, value)], out)
    except (TypeError, ValueError, KeyError, pa.ArrowException) as exc:
        raise DefaultValueError(f"the default of {path} ({value!r}) is not valid: {exc}") from None


def _default_value(t: AvroType, value: Any) -> Any:
    if isinstance(t, Union_):
        return _default_value(t.branches[0], value)
    if value is None:
        return None
    if is_decimal(t):
        assert isinstance(t, (Primitive, Fixed))
        raw = value.encode("latin-1")
        unscaled = int.from_bytes(raw, "big", signed=True) if raw else 0
        return decimal.Decimal(unscaled).scaleb(-t.scale)
    if isinstance(t, Fixed) or (isinstance(t, Primitive) and t.name == "bytes"):
        return value.encode("latin-1")
    if isinstance(t, Primitive):
        if t.logical == "date":
            return datetime.date(1970, 1, 1) + datetime.timedelta(days=int(value))
        if t.logical and "timestamp" in t.logical:
            micros = int(value) * (1000 if t.logical.endswith("millis") else 1)
            epoch = datetime.datetime(1970, 1, 1)
            moment = epoch + datetime.timedelta(microseconds=micros)
            return (
                moment
                if t.logical.startswith("local")
                else moment.replace(tzinfo=datetime.timezone.utc)
            )
        return value
    if isinstance(t, Record):
        return {f.name: _default_value(f.type, value.get(f.name, f.default)) for f in t.fields}
    if isinstance(t, Array):
        return [_default_value(t.items, v) for v in value]
    if isinstance(t, Map):
        return [(k, _default_value(t.values, v)) for k, v in value.items()]
    return value  # enum symbol
