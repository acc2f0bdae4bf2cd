"""Protobuf (``protobuf-confluent``): a registered schema's message mapped to Spark types as
Spark's ``from_protobuf`` maps it, records decoded and rows encoded. Loading the schema (``.proto``
text or a serialized descriptor): :mod:`unaligned.registry.protobuf.protobuf_schema`.

The column's message is ``valueMessageName`` (Spark's ``from_protobuf(messageName)``), else the
reader schema's first message. Each record's message indexes name the writer's message; a
record of another message fails as the ``mode`` says. Mapping, Spark's: int32, sint32,
sfixed32, uint32, fixed32 -> int; the 64-bit kinds -> bigint (an unsigned value above the
signed range wraps to a negative one, as Java reads it); with ``upcastUnsignedInts`` (Spark's
``upcast.unsigned.ints``) uint32 -> bigint and uint64 -> decimal(20,0), exact; float, double,
bool, string, bytes; enum -> string (its name); message -> struct (every field nullable: an
unset message or ``optional`` field is null, a proto3 scalar without presence is its value);
``google.protobuf.Timestamp`` -> timestamp; repeated -> array; map -> map; a recursive message
is refused. Records are decoded row by row with protobuf's parser; a value Arrow refuses fails
its record only. The schema the sink derives from a column's type:
:mod:`unaligned.registry.protobuf.proto_text`.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from unaligned.errors import RecordFormatError
from unaligned.registry.avro import vectors as av
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.framing import Frames, message_indexes
from unaligned.registry.options import ColumnFormat
from unaligned.registry.protobuf.protobuf_schema import compiled, message_index_bytes

TIMESTAMP = "google.protobuf.Timestamp"


# --- Protobuf -> Spark ------------------------------------------------------------------------


def _scalar_type(field_type: int, upcast: bool) -> DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    if upcast and field_type == F.TYPE_UINT32:
        return LongType()
    if upcast and field_type == F.TYPE_UINT64:
        return DecimalType(20, 0)
    table: dict[int, DataType] = {
        F.TYPE_INT32: IntegerType(),
        F.TYPE_SINT32: IntegerType(),
        F.TYPE_SFIXED32: IntegerType(),
        F.TYPE_UINT32: IntegerType(),
        F.TYPE_FIXED32: IntegerType(),
        F.TYPE_INT64: LongType(),
        F.TYPE_SINT64: LongType(),
        F.TYPE_SFIXED64: LongType(),
        F.TYPE_UINT64: LongType(),
        F.TYPE_FIXED64: LongType(),
        F.TYPE_FLOAT: FloatType(),
        F.TYPE_DOUBLE: DoubleType(),
        F.TYPE_BOOL: BooleanType(),
        F.TYPE_STRING: StringType(),
        F.TYPE_BYTES: BinaryType(),
        F.TYPE_ENUM: StringType(),
    }
    return table[field_type]


def message_type(descriptor: Any, upcast: bool = False, seen: tuple[str, ...] = ()) -> DataType:
    """The Spark type of a message (module docstring)."""
    if descriptor.full_name == TIMESTAMP:
        return TimestampType()
    if descriptor.full_name in seen:
        raise RecordFormatError(
            f"the Protobuf message {descriptor.full_name} is recursive: Spark types cannot hold it"
        )
    seen = (*seen, descriptor.full_name)
    fields = []
    for field in descriptor.fields:
        fields.append(StructField(field.name, _field_type(field, upcast, seen), True))
    return StructType(fields)


def _field_type(field: Any, upcast: bool, seen: tuple[str, ...]) -> DataType:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key = _scalar_type(message.fields_by_name["key"].type, upcast)
        value_field = message.fields_by_name["value"]
        return MapType(key, _single_type(value_field, upcast, seen), True)
    single = _single_type(field, upcast, seen)
    return ArrayType(single, False) if _repeated(field) else single


def _repeated(field: Any) -> bool:
    """A repeated field (protobuf 6+ says ``is_repeated``; older versions only ``label``)."""
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else bool(field.label == 3)  # LABEL_REPEATED


def _single_type(field: Any, upcast: bool, seen: tuple[str, ...]) -> DataType:
    if field.message_type is not None:
        return message_type(field.message_type, upcast, seen)
    return _scalar_type(field.type, upcast)


def reader_message(reader: ResolvedSchema, column: ColumnFormat) -> Any:
    """The message a column reads (``valueMessageName``, else the schema's first)."""
    return compiled(reader).message_named(column.message_name)


def protobuf_spark_type(reader: ResolvedSchema, column: ColumnFormat) -> DataType:
    return message_type(reader_message(reader, column), column.upcast_unsigned)


# --- decoding ---------------------------------------------------------------------------------


def _converter(descriptor: Any, upcast: bool) -> Callable[[Any], Any]:
    """A function from a message of ``descriptor`` to the value ``pa.array`` takes."""
    if descriptor.full_name == TIMESTAMP:
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return lambda m: epoch + datetime.timedelta(seconds=m.seconds, microseconds=m.nanos // 1000)
    steps = [(f.name, _field_converter(f, upcast)) for f in descriptor.fields]
    return lambda m: {name: convert(m) for name, convert in steps}


def _field_converter(field: Any, upcast: bool) -> Callable[[Any], Any]:
    name = field.name
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key = _single_converter(message.fields_by_name["key"], upcast)
        value = _single_converter(message.fields_by_name["value"], upcast)
        return lambda m: [(key(k), value(v)) for k, v in getattr(m, name).items()]
    single = _single_converter(field, upcast)
    if _repeated(field):
        return lambda m: [single(v) for v in getattr(m, name)]
    if field.has_presence:
        return lambda m: single(getattr(m, name)) if m.HasField(name) else None
    return lambda m: single(getattr(m, name))


def _single_converter(field: Any, upcast: bool) -> Callable[[Any], Any]:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.message_type is not None:
        return _converter(field.message_type, upcast)
    if field.enum_type is not None:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda v: names.get(v, str(v))
    if upcast and field.type == F.TYPE_UINT64:
        return decimal.Decimal
    if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):  # as Java's long holds them
        return lambda v: v - (1 << 64) if v >= 1 << 63 else v
    if field.type == F.TYPE_FIXED32 or (field.type == F.TYPE_UINT32 and not upcast):
        return lambda v: v - (1 << 32) if v >= 1 << 31 else v
    return lambda v: v


class ProtobufColumnDecoder:
    """Records of one writer schema read as the reader's message."""

    def __init__(
        self, column: ColumnFormat, reader: ResolvedSchema, writer: ResolvedSchema
    ) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self._reader = compiled(reader)
        self._writer = compiled(writer)
        self._message = reader_message(reader, column)
        self._class = self._reader.message_class(self._message)
        self._convert = _converter(self._message, column.upcast_unsigned)
        spark = message_type(self._message, column.upcast_unsigned)
        self._arrow = to_arrow_type(spark, timezone="UTC")

    def decode(self, reading: av.Reading, frames: Frames, rows: np.ndarray) -> pa.Array:
        paths, starts, bad = message_indexes(frames, rows)
        values: list[Any] = []
        for i, row in enumerate(rows.tolist()):
            reason = "its message indexes do not decode" if bad[i] else None
            if reason is None:
                reason = self._wrong_message(paths[i])
            if reason is None:
                try:
                    payload = frames.data[starts[i] : frames.ends[row]].tobytes()
                    values.append(self._convert(self._class.FromString(payload)))
                    continue
                except Exception as exc:  # protobuf's DecodeError, a bad UTF-8 string, ...
                    reason = f"not a Protobuf {self._message.full_name}: {exc}"
            reading.fail_with(np.array([row]), reason)
            values.append(None)
        return av.checked_array(values, self._arrow, reading, rows)

    def _wrong_message(self, path: tuple[int, ...]) -> str | None:
        try:
            name = self._writer.message(path).full_name
        except IndexError:
            return f"its message indexes {list(path)} name no message of the writer's schema"
        if name != self._message.full_name:
            return (
                f"it holds message {name}, not the reader's {self._message.full_name} (option "
                "'valueMessageName' / 'keyMessageName' names the message to read)"
            )
        return None


# --- encoding ---------------------------------------------------------------------------------


def _fill(message: Any, descriptor: Any, value: dict[str, Any]) -> None:

    given = {k.lower(): v for k, v in value.items()}
    for field in descriptor.fields:
        item = given.get(field.name.lower())
        if item is None:
            continue
        entry = field.message_type
        if entry is None and not _repeated(field):
            setattr(message, field.name, _scalar(field, item))
            continue
        target = getattr(message, field.name)
        if entry is not None and entry.GetOptions().map_entry:
            pairs = item.items() if isinstance(item, dict) else item
            value_field = entry.fields_by_name["value"]
            for k, v in pairs:
                if value_field.message_type is not None:
                    _set_message(target[k], value_field.message_type, v)
                else:
                    target[k] = _scalar(value_field, v)
        elif _repeated(field):
            for v in item:
                if entry is not None:
                    _set_message(target.add(), entry, v)
                else:
                    target.append(_scalar(field, v))
        else:
            _set_message(target, entry, item)


def _set_message(message: Any, descriptor: Any, value: Any) -> None:
    if descriptor.full_name == TIMESTAMP:
        message.FromDatetime(value)
    else:
        message.SetInParent()
        _fill(message, descriptor, value)


def _scalar(field: Any, value: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.enum_type is not None and isinstance(value, str):
        return field.enum_type.values_by_name[value].number
    if isinstance(value, decimal.Decimal):  # uint64 read with upcastUnsignedInts
        value = int(value)
    if isinstance(value, int) and value < 0:  # the unsigned kinds read as Java does
        if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
            return value + (1 << 64)
        if field.type in (F.TYPE_UINT32, F.TYPE_FIXED32):
            return value + (1 << 32)
    return value


class ProtobufRowEncoder:
    """Rows as one message of the writer schema (``valueMessageName``, else its first);
    ``prefix``: that message's indexes, as Confluent frames them."""

    def __init__(self, resolved: ResolvedSchema, message_name: str | None = None) -> None:
        schema = compiled(resolved)
        self._message = schema.message_named(message_name)
        self._class = schema.message_class(self._message)
        self.prefix = message_index_bytes(schema.path_of(self._message.full_name))

    def encode(self, column: pa.Array) -> pa.Array:
        payloads: list[bytes] = []
        valid = np.ones(len(column), bool)
        for i, row in enumerate(column.to_pylist()):
            if row is None:
                valid[i] = False
                payloads.append(b"")
                continue
            message = self._class()
            try:
                _fill(message, self._message, row)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise RecordFormatError(
                    f"row {i} of the chunk does not fit message {self._message.full_name}: {exc}"
                ) from None
            payloads.append(message.SerializeToString())
        offsets = np.zeros(len(payloads) + 1, np.int64)
        np.cumsum([len(p) for p in payloads], out=offsets[1:])
        data = np.frombuffer(b"".join(payloads) or b"\0", np.uint8)
        return av.binary_array(data, offsets.astype(np.int32), pa.binary(), valid)
