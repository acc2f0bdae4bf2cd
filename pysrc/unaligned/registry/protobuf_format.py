"""Protobuf (``protobuf-confluent``): the registry's ``.proto`` text compiled by ``protoc``, mapped
to Spark types as Spark's ``from_protobuf`` maps them, records decoded and rows encoded.

Needs ``pip install 'unaligned[protobuf]'`` (``protobuf``, and ``grpcio-tools``, which ships
``protoc`` and the well-known types): the registry holds schemas as ``.proto`` text, and
Python's protobuf cannot parse text. :func:`compiled` runs ``protoc`` once per schema and
process (the schema and its references written to a temporary directory under their import
names) and loads the descriptors into a pool of their own.

The column's message is the reader schema's first message (a record's message indexes name
the writer's message; a record of another message fails as the ``mode`` says). Mapping:
int32/sint32/sfixed32 -> int; int64, uint32, uint64 and their kinds -> bigint; float, double,
bool, string, bytes; enum -> string (its name); message -> struct (every field nullable: an
unset message or ``optional`` field is null, a proto3 scalar without presence is its value);
``google.protobuf.Timestamp`` -> timestamp; repeated -> array; map -> map; a recursive message
is refused. Records are decoded row by row with protobuf's parser. The schema the sink derives
from a column's type: :mod:`unaligned.registry.proto_text`.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import MissingExtraError, RecordFormatError
from unaligned.registry import avro_vectors as av
from unaligned.registry.framing import Frames, message_indexes
from unaligned.registry.schemas import ResolvedSchema

EXTRA = "pip install 'unaligned[protobuf]'"
TIMESTAMP = "google.protobuf.Timestamp"


def _modules() -> tuple[Any, Any, Any]:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise MissingExtraError(f"protobuf-confluent needs the protobuf package: {EXTRA}") from None
    return descriptor_pb2, descriptor_pool, message_factory


class Compiled:
    """A schema's descriptors in a pool of their own, and its messages' classes."""

    def __init__(self, resolved: ResolvedSchema) -> None:
        descriptor_pb2, descriptor_pool, message_factory = _modules()
        files = descriptor_pb2.FileDescriptorSet.FromString(_protoc(resolved))
        self.pool = descriptor_pool.DescriptorPool()
        for proto in files.file:
            self.pool.Add(proto)
        self.main = self.pool.FindFileByName(_MAIN)
        self._factory = message_factory

    def message(self, path: tuple[int, ...]) -> Any:
        """The descriptor of the message at Confluent's message index ``path``."""
        messages = list(self.main.message_types_by_name.values())
        found = messages[path[0]]
        for index in path[1:]:
            found = found.nested_types[index]
        return found

    def message_class(self, descriptor: Any) -> Any:
        return self._factory.GetMessageClass(descriptor)


_MAIN = "unaligned_schema.proto"
_COMPILED: ProcessMemo[ResolvedSchema, Compiled] = ProcessMemo()


def compiled(resolved: ResolvedSchema) -> Compiled:
    return _COMPILED.get_or_compute(resolved, lambda: Compiled(resolved))


def _protoc(resolved: ResolvedSchema) -> bytes:
    """``protoc --include_imports --descriptor_set_out`` of the schema and its references."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise MissingExtraError(
            f"protobuf-confluent compiles the registry's .proto text with protoc: {EXTRA}"
        ) from None
    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="unaligned-proto-") as work:
        root = Path(work)
        for name, schema in (*resolved.referenced, (_MAIN, resolved.schema)):
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(schema.text)
        out, log = root / "out.pb", root / "protoc.log"
        saved = os.dup(2)
        try:
            with open(log, "wb") as sink:
                os.dup2(sink.fileno(), 2)
                code = protoc.main(
                    [
                        "protoc",
                        f"-I{root}",
                        f"-I{include}",
                        "--include_imports",
                        f"--descriptor_set_out={out}",
                        str(root / _MAIN),
                    ]
                )
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if code != 0:
            raise RecordFormatError(
                f"protoc cannot compile {resolved.describe()}: "
                + log.read_text(errors="replace").replace(str(root) + "/", "").strip()
            )
        return out.read_bytes()


# --- Protobuf -> Spark ------------------------------------------------------------------------


def _scalar_type(field_type: int) -> DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    table: dict[int, DataType] = {
        F.TYPE_INT32: IntegerType(),
        F.TYPE_SINT32: IntegerType(),
        F.TYPE_SFIXED32: IntegerType(),
        F.TYPE_UINT32: LongType(),
        F.TYPE_FIXED32: LongType(),
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


def message_type(descriptor: Any, seen: tuple[str, ...] = ()) -> DataType:
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
        fields.append(StructField(field.name, _field_type(field, seen), True))
    return StructType(fields)


def _field_type(field: Any, seen: tuple[str, ...]) -> DataType:

    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key = _scalar_type(message.fields_by_name["key"].type)
        value_field = message.fields_by_name["value"]
        return MapType(key, _single_type(value_field, seen), True)
    single = _single_type(field, seen)
    return ArrayType(single, False) if _repeated(field) else single


def _repeated(field: Any) -> bool:
    """A repeated field (protobuf 6+ says ``is_repeated``; older versions only ``label``)."""
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else bool(field.label == 3)  # LABEL_REPEATED


def _single_type(field: Any, seen: tuple[str, ...]) -> DataType:
    if field.message_type is not None:
        return message_type(field.message_type, seen)
    return _scalar_type(field.type)


def protobuf_spark_type(reader: ResolvedSchema) -> DataType:
    return message_type(compiled(reader).message((0,)))


# --- decoding ---------------------------------------------------------------------------------


def _converter(descriptor: Any) -> Callable[[Any], Any]:
    """A function from a message of ``descriptor`` to the value ``pa.array`` takes."""
    if descriptor.full_name == TIMESTAMP:
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return lambda m: epoch + datetime.timedelta(seconds=m.seconds, microseconds=m.nanos // 1000)
    steps = [(f.name, _field_converter(f)) for f in descriptor.fields]
    return lambda m: {name: convert(m) for name, convert in steps}


def _field_converter(field: Any) -> Callable[[Any], Any]:

    name = field.name
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        value = _single_converter(message.fields_by_name["value"])
        return lambda m: [(k, value(v)) for k, v in getattr(m, name).items()]
    single = _single_converter(field)
    if _repeated(field):
        return lambda m: [single(v) for v in getattr(m, name)]
    if field.has_presence:
        return lambda m: single(getattr(m, name)) if m.HasField(name) else None
    return lambda m: single(getattr(m, name))


def _single_converter(field: Any) -> Callable[[Any], Any]:
    if field.message_type is not None:
        return _converter(field.message_type)
    if field.enum_type is not None:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda v: names.get(v, str(v))
    return lambda v: v


class ProtobufColumnDecoder:
    """Records of one writer schema read as the reader's first message."""

    def __init__(self, reader: ResolvedSchema, writer: ResolvedSchema) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self._reader = compiled(reader)
        self._writer = compiled(writer)
        self._message = self._reader.message((0,))
        self._class = self._reader.message_class(self._message)
        self._convert = _converter(self._message)
        self._arrow = to_arrow_type(message_type(self._message), timezone="UTC")

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
        return pa.array(values, self._arrow)

    def _wrong_message(self, path: tuple[int, ...]) -> str | None:
        try:
            name = self._writer.message(path).full_name
        except IndexError:
            return f"its message indexes {list(path)} name no message of the writer's schema"
        if name != self._message.full_name:
            return f"it holds message {name}, not the reader's {self._message.full_name}"
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
    if field.enum_type is not None and isinstance(value, str):
        return field.enum_type.values_by_name[value].number
    return value


class ProtobufRowEncoder:
    """Rows as the writer schema's first message; ``prefix``: its message indexes."""

    prefix = b"\x00"  # Confluent's short form of the message indexes [0]

    def __init__(self, resolved: ResolvedSchema) -> None:
        schema = compiled(resolved)
        self._message = schema.message((0,))
        self._class = schema.message_class(self._message)

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
