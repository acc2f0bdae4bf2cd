"""How Arrow rows become Avro blocks: the Arrow -> Avro schema mapping and a column-wise encoder.

:func:`avro_schema` maps an Arrow schema to an Avro record schema (the mapping is versioned by
:data:`unaligned.channel_state.format.SCHEMA_VERSION`). :func:`encode_rows` turns a batch into
Avro's binary row encoding, byte for byte what fastavro writes row by row, for
``fastavro.write.Writer.write_block`` (:class:`EncodedBlock`). Temporal columns travel as their
raw integers: :func:`view_as` with :func:`storage_schema` before encoding, and
:func:`records_to_batch` on the way back. Codecs are the Avro container codecs
(:mod:`unaligned.channel_state.codecs`).
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from unaligned.errors import SchemaMismatchError

_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- Arrow <-> Avro schema ------------------------------------------------------------------------


def _unsupported(path: str, arrow_type: pa.DataType) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {path!r} has type {arrow_type}, which channel state cannot store "
        "(supported: binary, string, bool, integers, float, double, decimal, date, timestamp, "
        "time, null, list and struct of these)"
    )


def _avro_base(arrow_type: pa.DataType, path: str, record_name: str) -> Any:
    t = pa.types
    if t.is_null(arrow_type):
        return "null"
    if t.is_boolean(arrow_type):
        return "boolean"
    if t.is_int8(arrow_type) or t.is_int16(arrow_type) or t.is_int32(arrow_type):
        return "int"
    if t.is_uint8(arrow_type) or t.is_uint16(arrow_type):
        return "int"
    if t.is_int64(arrow_type) or t.is_uint32(arrow_type):
        return "long"
    if t.is_float32(arrow_type):
        return "float"
    if t.is_float64(arrow_type):
        return "double"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return "bytes"
    if t.is_fixed_size_binary(arrow_type):
        return "bytes"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string"
    if t.is_decimal128(arrow_type):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": arrow_type.precision,
            "scale": arrow_type.scale,
        }
    if t.is_date32(arrow_type):
        return {"type": "int", "logicalType": "date"}
    if t.is_timestamp(arrow_type):
        logical = {"us": "timestamp-micros", "ms": "timestamp-millis"}.get(arrow_type.unit)
        # Other units are stored as their raw int64 value (the Arrow schema gives the unit).
        return {"type": "long", "logicalType": logical} if logical else "long"
    if t.is_date64(arrow_type) or t.is_time64(arrow_type) or t.is_duration(arrow_type):
        return "long"
    if t.is_time32(arrow_type):
        return "int"
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        item = arrow_type.value_field
        return {
            "type": "array",
            "items": _avro_type(item.type, item.nullable, f"{path}[]", f"{record_name}_item"),
        }
    if t.is_struct(arrow_type):
        fields = []
        for index in range(arrow_type.num_fields):
            child = arrow_type.field(index)
            fields.append(_avro_field(child, f"{path}.{child.name}", f"{record_name}_{index}"))
        return {"type": "record", "name": record_name, "fields": fields}
    raise _unsupported(path, arrow_type)


def _avro_type(arrow_type: pa.DataType, nullable: bool, path: str, record_name: str) -> Any:
    base = _avro_base(arrow_type, path, record_name)
    if nullable and base != "null":
        return ["null", base]
    return base


def _avro_field(arrow_field: pa.Field, path: str, record_name: str) -> dict[str, Any]:
    if not _AVRO_NAME.match(arrow_field.name):
        raise SchemaMismatchError(
            f"column {path!r}: channel state needs Avro field names ([A-Za-z_][A-Za-z0-9_]*)"
        )
    return {
        "name": arrow_field.name,
        "type": _avro_type(arrow_field.type, arrow_field.nullable, path, record_name),
    }


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro record schema of channel state for sink input rows of Arrow ``schema``.

    binary -> bytes, string -> string, int8/16/32 -> int, int64 -> long, float -> float,
    double -> double, bool -> boolean, decimal128 -> bytes/decimal, date32 -> int/date,
    timestamp[us] -> long/timestamp-micros (ms -> timestamp-millis; s, ns -> long),
    list -> array, struct -> record; a nullable field is a union with ``null``. Maps and
    other types raise SchemaMismatchError naming the column.
    """
    fields = [_avro_field(f, f.name, f"Row_{i}") for i, f in enumerate(schema)]
    return {
        "type": "record",
        "name": "Row",
        "namespace": "unaligned.channel_state",
        "fields": fields,
    }


def _storage_type(arrow_type: pa.DataType, *, for_read: bool) -> pa.DataType:
    """The layout-compatible type whose Python values fastavro writes (or returns).

    Temporal values are written as their raw integers (zero-copy ``view``). fastavro returns
    ``datetime``/``date`` for logical types, which pyarrow converts back exactly; the
    temporal types without a logical type come back as integers.
    """
    t = pa.types
    if t.is_timestamp(arrow_type):
        if for_read and arrow_type.unit in ("us", "ms"):
            return arrow_type
        return pa.int64()
    if t.is_date32(arrow_type):
        return arrow_type if for_read else pa.int32()
    if t.is_date64(arrow_type) or t.is_time64(arrow_type) or t.is_duration(arrow_type):
        return pa.int64()
    if t.is_time32(arrow_type):
        return pa.int32()
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        item = arrow_type.value_field
        new_item = item.with_type(_storage_type(item.type, for_read=for_read))
        return pa.list_(new_item) if t.is_list(arrow_type) else pa.large_list(new_item)
    if t.is_struct(arrow_type):
        return pa.struct(
            [f.with_type(_storage_type(f.type, for_read=for_read)) for f in arrow_type]
        )
    return arrow_type


def storage_schema(schema: pa.Schema, *, for_read: bool) -> pa.Schema:
    """``schema`` with every type replaced by its storage type (see :func:`_storage_type`)."""
    return pa.schema(
        [f.with_type(_storage_type(f.type, for_read=for_read)) for f in schema],
        metadata=schema.metadata,
    )


def view_as(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with its columns viewed (zero-copy) as the layout-compatible ``schema``."""
    columns = [
        col if col.type == field.type else col.view(field.type)
        for col, field in zip(batch.columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def records_to_batch(
    records: list[Any], read_schema: pa.Schema, schema: pa.Schema
) -> pa.RecordBatch:
    """Decoded Avro records as a batch of ``schema``; ``read_schema`` is
    ``storage_schema(schema, for_read=True)`` (passed in: callers compute it once)."""
    return view_as(pa.RecordBatch.from_pylist(records, schema=read_schema), schema)


def encode_arrow_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_arrow_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))


# --- column-wise Avro encoding --------------------------------------------------------------------
#
# fastavro encodes one Python dict at a time (about 10 MB/s of Kafka-like rows measured here,
# see benchmarks/bench_channel_state.py); the drain after a cut is on the batch's critical
# path. So rows are encoded column-wise with Arrow compute into Avro's binary encoding and
# handed to fastavro as whole blocks (``Writer.write_block``: fastavro still writes the header,
# compresses with the codec, and writes sync markers). The bytes equal fastavro's own row
# encoding (tests compare them). Decimals are encoded cell by cell with fastavro.

_BIN = pa.large_binary()
_EMPTY = pa.scalar(b"", _BIN)
_ZERO = pa.scalar(b"\x00", _BIN)  # a null union branch, and the end of an array
_VALUE_BRANCH = pa.scalar(b"\x02", _BIN)  # union branch 1 (["null", T])


def _binary_from(lengths: np.ndarray, data: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(_BIN, len(lengths), buffers)


def _varints(values: np.ndarray) -> pa.Array:
    """Avro ``long`` encoding of each value: zigzag, then 7-bit groups, lowest first."""
    signed = values.astype(np.int64, copy=False)
    rest = ((signed << 1) ^ (signed >> 63)).view(np.uint64)
    groups = np.empty((len(rest), 10), dtype=np.uint8)
    lengths = np.ones(len(rest), dtype=np.int64)
    for i in range(10):
        more = rest >= 0x80
        groups[:, i] = (rest & 0x7F) | (more.astype(np.uint64) << np.uint64(7))
        if not more.any():
            break
        lengths += more
        rest = rest >> np.uint64(7)
    return _binary_from(lengths, groups[np.arange(10) < lengths[:, None]])


def _concat(*parts: Any) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _EMPTY)


def _numpy(arr: pa.Array, fill: Any) -> np.ndarray:
    values: np.ndarray = pc.fill_null(arr, fill).to_numpy(zero_copy_only=False)
    return values


def _encode_value(arr: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """Each value's Avro encoding (null slots: anything; the union picks the null branch)."""
    t, n = pa.types, len(arr)
    if t.is_null(arrow_type):
        return pa.repeat(_EMPTY, n)
    if t.is_boolean(arrow_type):
        return _binary_from(np.ones(n, np.int64), _numpy(arr, False).astype(np.uint8))
    if t.is_integer(arrow_type):
        return _varints(_numpy(arr, 0))
    if t.is_float32(arrow_type) or t.is_float64(arrow_type):
        values = _numpy(arr, 0).astype("<f4" if t.is_float32(arrow_type) else "<f8")
        return _binary_from(np.full(n, values.itemsize, np.int64), values.view(np.uint8))
    if (
        t.is_binary(arrow_type)
        or t.is_large_binary(arrow_type)
        or t.is_string(arrow_type)
        or t.is_large_string(arrow_type)
        or t.is_fixed_size_binary(arrow_type)
    ):
        data = pc.fill_null(arr.cast(_BIN), _EMPTY)
        return _concat(_varints(pc.binary_length(data).to_numpy()), data)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        counts = _numpy(pc.list_value_length(arr), 0).astype(np.int64)
        item = arrow_type.value_field
        items = _encode_field(arr.flatten(), item.type, item.nullable)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets), items), _EMPTY)
        blocks = pc.if_else(pa.array(counts > 0), _concat(_varints(counts), joined), _EMPTY)
        return _concat(blocks, _ZERO)
    if t.is_struct(arrow_type):
        children = arr.flatten()  # sliced like arr, parent nulls merged in
        if not children:
            return pa.repeat(_EMPTY, n)
        return _concat(
            *[
                _encode_field(c, f.type, f.nullable)
                for c, f in zip(children, arrow_type, strict=True)
            ]
        )
    schema = fastavro.parse_schema(_avro_base(arrow_type, "", "Cell"))
    cells = []
    for value in arr.to_pylist():
        out = io.BytesIO()
        if value is not None:
            fastavro.schemaless_writer(out, schema, value)
        cells.append(out.getvalue())
    return pa.array(cells, _BIN)


def _encode_field(arr: pa.Array, arrow_type: pa.DataType, nullable: bool) -> pa.Array:
    value = _encode_value(arr, arrow_type)
    if not nullable or pa.types.is_null(arrow_type):
        return value
    branch = _concat(_VALUE_BRANCH, value)
    return branch if arr.null_count == 0 else pc.if_else(pc.is_valid(arr), branch, _ZERO)


def encode_rows(batch: pa.RecordBatch) -> bytes:
    """The Avro encoding of every row of ``batch`` (temporal columns already viewed as ints)."""
    if batch.num_rows == 0 or batch.num_columns == 0:
        return b""
    fields = zip(batch.columns, batch.schema, strict=True)
    rows = _concat(*[_encode_field(c, f.type, f.nullable) for c, f in fields])
    offsets = np.frombuffer(rows.buffers()[1], np.int64, len(rows) + 1, rows.offset * 8)
    data = rows.buffers()[2]
    encoded: bytes = data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_pybytes()
    return encoded


class EncodedBlock:
    """What ``fastavro.write.Writer.write_block`` reads from a block."""

    def __init__(self, num_records: int, data: bytes) -> None:
        self.num_records = num_records
        self.bytes_ = io.BytesIO(data)
