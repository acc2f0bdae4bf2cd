"""Channel state: the sink input rows a task snapshots when it cuts at an unaligned barrier.

Flink (FLIP-76) persists in-flight buffers with the checkpoint when a barrier overtakes them.
Here a sink task that passes ``alignedCheckpointTimeout`` stops writing to the external system,
drains the rest of its input into channel state with a :class:`ChannelStateWriter`, and returns
a :class:`ChannelStateRef` in its commit message. The next batch's task with the same index
replays the state (:func:`read_channel_state`) before its own input.

Format
    An Avro object container file (fastavro) over the sink's input rows. The Avro schema is
    derived from the Arrow schema of the input (:func:`avro_schema`); the exact Arrow schema
    is kept in the header so replay yields batches with the input's types and nullability.
    Header metadata (all strings)::

        unaligned.channel_state.format_version  "1"   layout of this header
        unaligned.channel_state.schema_version  "1"   the Arrow -> Avro mapping rules
        unaligned.barrier_id / query_id / task_index  whose snapshot this is
        unaligned.write_id                      random id of this one writer (see below)
        unaligned.arrow_schema                  base64 of the Arrow IPC schema

    Codecs: ``null`` and ``deflate`` are built in; ``snappy`` needs the ``cramjam`` package
    (or ``python-snappy``); ``zstandard`` needs ``backports.zstd`` (Python < 3.14).

Inline or file (Flink's data-inline-threshold)
    The writer keeps the Avro bytes in memory while they stay within
    ``inline_threshold_bytes``; :meth:`ChannelStateWriter.finish` then returns an
    :class:`InlineChannelState` that travels in the commit record. Once the bytes pass the
    threshold the writer opens a file, writes what it has, and streams every further Avro
    block to it: memory stays within the threshold plus one block (``block_bytes``, before
    compression) plus one chunk of rows (``chunk_rows``).

Files and naming
    One file per (barrier, task): ``<state_dir>/barrier-<barrierId>/task-<index>.avro``. It is
    written under an attempt-specific temporary name,
    ``task-<index>.attempt-<attempt>.avro.tmp``, and renamed to the final name by
    :meth:`~ChannelStateWriter.finish`, so nobody sees half a file. Only the committed
    attempt's ref is in the sink's commit record; a retried task attempt overwrites the final
    file before returning its own ref. Every ref carries the writer's ``write_id`` and the
    size and CRC-32 of the Avro bytes; a file replaced after its ref was handed out (e.g. by
    a speculative duplicate attempt that finished after the committed one) fails replay with
    :class:`~unaligned.errors.ChannelStateError` instead of replaying other rows. Temporary
    files of failed attempts stay until the sink's cleanup removes them
    (:func:`list_state_files`, :func:`delete_barrier_state`).

Carry-forward by reference
    ``start_row`` is the position replay starts from (the first row not yet written).
    If a replay times out again, ``ref.advanced(rows_written)`` refers to the same file (or
    inline bytes) with a later ``start_row``; nothing is rewritten. ``barrier_id`` stays the
    barrier that wrote the state, whichever later barrier carries the ref. A file may be
    deleted only when no committed ref points at it any more.

Corrupt or missing state (missing or truncated file, size or CRC-32 other than the ref's,
wrong header, wrong barrier, task, query or write id, bad inline bytes, fewer or more rows than
the ref says) raises ChannelStateError naming the file (or "inline state") and the barrier.
Size and CRC-32 are checked by a streaming pass before the first row is yielded, so no row of
a damaged state reaches the external system. Rows are never skipped.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import importlib
import io
import json
import logging
import re
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import fastavro
import fastavro.write
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from unaligned.barrier import Location, resolve_location
from unaligned.errors import ChannelStateError, OptionError, SchemaMismatchError

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
SCHEMA_VERSION = 1
META_FORMAT_VERSION = "unaligned.channel_state.format_version"
META_SCHEMA_VERSION = "unaligned.channel_state.schema_version"
META_BARRIER_ID = "unaligned.barrier_id"
META_QUERY_ID = "unaligned.query_id"
META_TASK_INDEX = "unaligned.task_index"
META_WRITE_ID = "unaligned.write_id"
META_ARROW_SCHEMA = "unaligned.arrow_schema"

CODECS = ("null", "deflate", "snappy", "zstandard")
#: Codec -> (modules fastavro can use for it, the package to install).
_CODEC_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "snappy": (("cramjam", "snappy"), "cramjam"),
    "zstandard": (("compression.zstd", "backports.zstd"), "backports.zstd"),
}

DEFAULT_INLINE_THRESHOLD_BYTES = 20 * 1024  # Flink's state.storage.fs.memory-threshold
DEFAULT_BLOCK_BYTES = 256 * 1024
DEFAULT_CHUNK_ROWS = 4096
_CHECK_CHUNK_BYTES = 1 << 20

_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ATTEMPT = re.compile(r"^[A-Za-z0-9_-]+$")
_FINAL_NAME = re.compile(r"^task-(\d+)\.avro$")
_TEMP_NAME = re.compile(r"^task-(\d+)\.attempt-([A-Za-z0-9_-]+)\.avro\.tmp$")
_BARRIER_DIR = re.compile(r"^barrier-(\d+)$")


# --- codecs ---------------------------------------------------------------------------------------


def check_codec(codec: str) -> None:
    """Raise OptionError if ``codec`` is unknown or needs a package that is not installed."""
    if codec not in CODECS:
        raise OptionError(f"channel state codec {codec!r} is not one of {', '.join(CODECS)}")
    if codec not in _CODEC_MODULES:
        return
    modules, package = _CODEC_MODULES[codec]
    for module in modules:
        try:
            importlib.import_module(module)
            return
        except ImportError:
            continue
    raise OptionError(
        f"channel state codec {codec!r} needs the Python package {package!r}, which is not "
        f"installed (install {package!r}, or choose codec 'deflate' or 'null')"
    )


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


def _storage_schema(schema: pa.Schema, *, for_read: bool) -> pa.Schema:
    return pa.schema(
        [f.with_type(_storage_type(f.type, for_read=for_read)) for f in schema],
        metadata=schema.metadata,
    )


def _encode_arrow_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _decode_arrow_schema(text: str) -> pa.Schema:
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
    return pc.fill_null(arr, fill).to_numpy(zero_copy_only=False)


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
    if (t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_string(arrow_type)
            or t.is_large_string(arrow_type) or t.is_fixed_size_binary(arrow_type)):
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
            *[_encode_field(c, f.type, f.nullable) for c, f in zip(children, arrow_type)]
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


def _encode_rows(batch: pa.RecordBatch) -> bytes:
    """The Avro encoding of every row of ``batch`` (temporal columns already viewed as ints)."""
    if batch.num_rows == 0 or batch.num_columns == 0:
        return b""
    fields = zip(batch.columns, batch.schema)
    rows = _concat(*[_encode_field(c, f.type, f.nullable) for c, f in fields])
    offsets = np.frombuffer(rows.buffers()[1], np.int64, len(rows) + 1, rows.offset * 8)
    data = rows.buffers()[2]
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_pybytes()


class _EncodedBlock:
    """What ``fastavro.write.Writer.write_block`` reads from a block."""

    def __init__(self, num_records: int, data: bytes) -> None:
        self.num_records = num_records
        self.bytes_ = io.BytesIO(data)


# --- references -----------------------------------------------------------------------------------


_INT_FIELDS = ("barrier_id", "task_index", "row_count", "byte_size", "crc32", "start_row")


@dataclass(frozen=True, kw_only=True)
class ChannelStateRef:
    """Where one task's channel state of one barrier is, and where replay starts.

    ``barrier_id``, ``task_index``, ``query_id`` and ``write_id`` identify the snapshot and
    must match the state's header. ``row_count`` is the total number of rows in the state,
    ``byte_size`` the size of its Avro bytes and ``crc32`` their CRC-32 (the null and deflate
    codecs have no checksum of their own). ``start_row`` is the first row replay yields (rows
    before it were already written); ``0 <= start_row <= row_count``.
    """

    barrier_id: int
    task_index: int
    query_id: str
    write_id: str
    row_count: int
    byte_size: int
    crc32: int
    start_row: int = 0

    def __post_init__(self) -> None:
        if self.row_count < 0 or self.byte_size < 0:
            raise ValueError(f"{self.describe()}: negative row_count or byte_size")
        if not 0 <= self.start_row <= self.row_count:
            raise ValueError(
                f"{self.describe()}: start_row {self.start_row} outside 0..{self.row_count}"
            )

    @property
    def remaining_rows(self) -> int:
        """Rows replay still has to yield."""
        return self.row_count - self.start_row

    @property
    def exhausted(self) -> bool:
        """True when every row has been replayed."""
        return self.start_row == self.row_count

    def advanced(self, rows_consumed: int) -> "ChannelStateRef":
        """The same state with replay starting ``rows_consumed`` rows later (carry-forward)."""
        if not 0 <= rows_consumed <= self.remaining_rows:
            raise ValueError(
                f"{self.describe()}: cannot advance by {rows_consumed} rows, "
                f"{self.remaining_rows} remain"
            )
        return dataclasses.replace(self, start_row=self.start_row + rows_consumed)

    def where(self) -> str:
        """The file path or ``"inline state"``, for messages."""
        raise NotImplementedError

    def describe(self) -> str:
        return (
            f"channel state {self.where()} (barrier {self.barrier_id}, task {self.task_index})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with a ``kind`` of ``inline`` or ``file`` (bytes as base64)."""
        data = dataclasses.asdict(self)
        if isinstance(self, InlineChannelState):
            data["inline_avro"] = base64.b64encode(self.inline_avro).decode("ascii")
        data["kind"] = "inline" if isinstance(self, InlineChannelState) else "file"
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "ChannelStateRef":
        """Inverse of :meth:`to_dict`; ChannelStateError if ``data`` is not a ref."""
        try:
            cls = {"inline": InlineChannelState, "file": FileChannelState}[data["kind"]]
            kwargs = {f.name: data[f.name] for f in dataclasses.fields(cls)}
            for name in _INT_FIELDS:
                if type(kwargs[name]) is not int:
                    raise TypeError(f"{name} is not an integer")
            if cls is InlineChannelState:
                kwargs["inline_avro"] = base64.b64decode(kwargs["inline_avro"], validate=True)
            return cls(**kwargs)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            barrier = data.get("barrier_id", "?") if isinstance(data, dict) else "?"
            raise ChannelStateError(
                f"malformed channel state reference for barrier {barrier}: {exc!r}"
            ) from exc

    @staticmethod
    def from_json(text: str) -> "ChannelStateRef":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ChannelStateError(f"channel state reference is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ChannelStateError("channel state reference is not a JSON object")
        return ChannelStateRef.from_dict(data)


@dataclass(frozen=True, kw_only=True)
class InlineChannelState(ChannelStateRef):
    """Channel state small enough to sit in the commit record: the whole Avro file's bytes."""

    inline_avro: bytes

    def where(self) -> str:
        return "inline state"


@dataclass(frozen=True, kw_only=True)
class FileChannelState(ChannelStateRef):
    """Channel state in a file: ``path`` in its filesystem; ``uri`` rebuilds that filesystem
    with ``FileSystem.from_uri`` (``None`` when the writer was handed a filesystem: then the
    reader must be handed the same one)."""

    path: str
    uri: str | None

    def where(self) -> str:
        return self.uri or self.path

    def location(self, filesystem: pafs.FileSystem | None = None) -> Location:
        if filesystem is not None:
            return Location(filesystem, self.path, self.uri)
        if self.uri is None:
            raise ChannelStateError(
                f"{self.describe()} was written through a caller-supplied filesystem; "
                "pass the same filesystem to read or delete it"
            )
        return resolve_location(self.uri)


# --- naming ---------------------------------------------------------------------------------------


def barrier_dir_name(barrier_id: int) -> str:
    return f"barrier-{barrier_id}"


def state_file_name(task_index: int) -> str:
    return f"task-{task_index}.avro"


def temp_file_name(task_index: int, attempt: str) -> str:
    return f"task-{task_index}.attempt-{attempt}.avro.tmp"


@dataclass(frozen=True)
class StateFile:
    """A file found under a barrier's directory.

    ``attempt`` is set for a temporary file (an attempt that never finished, or is still
    running) and ``None`` for a finished ``task-<index>.avro``.
    """

    path: str
    barrier_id: int
    task_index: int
    attempt: str | None
    size_bytes: int


def list_state_files(
    state_dir: str, barrier_id: int, filesystem: pafs.FileSystem | None = None
) -> list[StateFile]:
    """Every channel-state file (finished and temporary) of ``barrier_id``, sorted by path."""
    location = resolve_location(state_dir, filesystem).child(barrier_dir_name(barrier_id))
    selector = pafs.FileSelector(location.path, allow_not_found=True)
    found = []
    for info in location.filesystem.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        final, temp = _FINAL_NAME.match(info.base_name), _TEMP_NAME.match(info.base_name)
        if final:
            found.append(StateFile(info.path, barrier_id, int(final.group(1)), None, info.size))
        elif temp:
            found.append(
                StateFile(info.path, barrier_id, int(temp.group(1)), temp.group(2), info.size)
            )
    return sorted(found, key=lambda f: f.path)


def list_barrier_ids(state_dir: str, filesystem: pafs.FileSystem | None = None) -> list[int]:
    """Ids of the barriers that have a directory under ``state_dir``, ascending."""
    location = resolve_location(state_dir, filesystem)
    selector = pafs.FileSelector(location.path, allow_not_found=True)
    ids = []
    for info in location.filesystem.get_file_info(selector):
        match = _BARRIER_DIR.match(info.base_name)
        if match and info.type == pafs.FileType.Directory:
            ids.append(int(match.group(1)))
    return sorted(ids)


def delete_channel_state(
    refs: Iterable[ChannelStateRef], filesystem: pafs.FileSystem | None = None
) -> int:
    """Delete the files of ``refs`` (inline refs have none); idempotent. Returns files removed.

    Call only for refs no committed record still needs (carried-forward refs share a file).
    """
    removed = 0
    for ref in refs:
        if not isinstance(ref, FileChannelState):
            continue
        location = ref.location(filesystem)
        try:
            location.filesystem.delete_file(location.path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def delete_barrier_state(
    state_dir: str, barrier_id: int, filesystem: pafs.FileSystem | None = None
) -> None:
    """Remove ``barrier-<id>/`` with every file in it (finished and stale); idempotent.

    Only once no committed ref (carried-forward refs included) points into that barrier."""
    location = resolve_location(state_dir, filesystem).child(barrier_dir_name(barrier_id))
    try:
        location.filesystem.delete_dir(location.path)
    except FileNotFoundError:
        pass


# --- writer ---------------------------------------------------------------------------------------


class _SpillingStream:
    """The file-like object fastavro writes to: memory until ``threshold`` bytes would be
    passed, then the temporary file (opened by ``open_file``) with what memory held."""

    def __init__(self, threshold: int, open_file: Any) -> None:
        self._threshold = threshold
        self._open_file = open_file
        self._memory: io.BytesIO | None = io.BytesIO()
        self._file: Any = None
        self.bytes_written = 0
        self.crc32 = 0

    @property
    def spilled(self) -> bool:
        return self._file is not None

    @property
    def memory_bytes(self) -> int:
        return 0 if self._memory is None else self._memory.tell()

    def memory_value(self) -> bytes:
        assert self._memory is not None
        return self._memory.getvalue()

    def write(self, data: bytes) -> int:
        if self._memory is not None and self.bytes_written + len(data) > self._threshold:
            self._file = self._open_file()
            self._file.write(self._memory.getvalue())
            self._memory = None
        if self._memory is not None:
            self._memory.write(data)
        else:
            self._file.write(data)
        self.bytes_written += len(data)
        self.crc32 = zlib.crc32(data, self.crc32)
        return len(data)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close_file(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    # fastavro asks these to decide whether it appends to an existing file: it does not.
    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.bytes_written


class ChannelStateWriter:
    """Streams sink input rows of one task at one barrier into channel state.

    ``append(batch)`` as often as needed, then exactly one of ``finish()`` (returns the ref)
    or ``discard()``. Usable as a context manager: leaving it with an exception discards.
    Nothing is opened or written before the first ``append``/``finish``.

    ``attempt`` names the temporary file ([A-Za-z0-9_-]+, unique among concurrently running
    attempts of the task, e.g. Spark's ``taskAttemptId``).
    """

    def __init__(
        self,
        *,
        state_dir: str,
        barrier_id: int,
        query_id: str,
        task_index: int,
        attempt: str,
        schema: pa.Schema,
        codec: str = "null",
        compression_level: int | None = None,
        inline_threshold_bytes: int = DEFAULT_INLINE_THRESHOLD_BYTES,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        filesystem: pafs.FileSystem | None = None,
    ) -> None:
        check_codec(codec)
        if not _ATTEMPT.match(attempt):
            raise ValueError(f"attempt {attempt!r} must match [A-Za-z0-9_-]+")
        if inline_threshold_bytes < 0 or block_bytes < 1 or chunk_rows < 1:
            raise ValueError("inline_threshold_bytes >= 0, block_bytes >= 1, chunk_rows >= 1")
        self._state_dir = state_dir
        self._filesystem = filesystem
        self._barrier_id = barrier_id
        self._query_id = query_id
        self._task_index = task_index
        self._attempt = attempt
        self._schema = schema
        self._write_schema = _storage_schema(schema, for_read=False)
        self._avro_schema = fastavro.parse_schema(avro_schema(schema))
        self._codec = codec
        self._compression_level = compression_level
        self._inline_threshold = inline_threshold_bytes
        self._block_bytes = block_bytes
        self._chunk_rows = chunk_rows
        self._write_id = uuid.uuid4().hex
        self._rows = 0
        self._pending: list[bytes] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._stream: _SpillingStream | None = None
        self._avro: Any = None
        self._temp: Location | None = None
        self._closed = False

    # -- observation

    @property
    def row_count(self) -> int:
        return self._rows

    @property
    def bytes_written(self) -> int:
        """Avro bytes emitted so far (header and finished blocks; not the pending block)."""
        return 0 if self._stream is None else self._stream.bytes_written

    @property
    def memory_bytes(self) -> int:
        """Avro bytes held in memory for a possible inline result (0 once spilled to a file);
        the block being filled (about ``block_bytes``, uncompressed) comes on top."""
        return 0 if self._stream is None else self._stream.memory_bytes

    @property
    def spilled(self) -> bool:
        """True once the state went to a file."""
        return self._stream is not None and self._stream.spilled

    def describe(self) -> str:
        return (
            f"channel state of barrier {self._barrier_id}, task {self._task_index} "
            f"under {self._state_dir}"
        )

    # -- writing

    def _barrier_location(self) -> Location:
        location = resolve_location(self._state_dir, self._filesystem)
        return location.child(barrier_dir_name(self._barrier_id))

    def _open_temp(self) -> Any:
        barrier = self._barrier_location()
        barrier.filesystem.create_dir(barrier.path, recursive=True)
        self._temp = barrier.child(temp_file_name(self._task_index, self._attempt))
        logger.info("spilling %s to %s", self.describe(), self._temp.path)
        return self._temp.filesystem.open_output_stream(self._temp.path)

    def _start(self) -> None:
        if self._closed:
            raise ChannelStateError(f"{self.describe()}: writer already finished or discarded")
        if self._avro is not None:
            return
        self._stream = _SpillingStream(self._inline_threshold, self._open_temp)
        metadata = {
            META_FORMAT_VERSION: str(FORMAT_VERSION),
            META_SCHEMA_VERSION: str(SCHEMA_VERSION),
            META_BARRIER_ID: str(self._barrier_id),
            META_QUERY_ID: self._query_id,
            META_TASK_INDEX: str(self._task_index),
            META_WRITE_ID: self._write_id,
            META_ARROW_SCHEMA: _encode_arrow_schema(self._schema),
        }
        self._avro = fastavro.write.Writer(
            self._stream,
            self._avro_schema,
            codec=self._codec,
            sync_interval=self._block_bytes,
            metadata=metadata,
            compression_level=self._compression_level,
        )

    def append(self, batch: pa.RecordBatch) -> None:
        """Add ``batch``'s rows (after every row appended before)."""
        if not batch.schema.equals(self._schema):
            raise SchemaMismatchError(
                f"{self.describe()}: batch schema {batch.schema} differs from {self._schema}"
            )
        for column, field in zip(batch.columns, batch.schema):
            if not field.nullable and column.null_count:
                raise SchemaMismatchError(
                    f"{self.describe()}: non-nullable column {field.name!r} holds nulls"
                )
        self._start()
        columns = [
            col if col.type == storage.type else col.view(storage.type)
            for col, storage in zip(batch.columns, self._write_schema)
        ]
        storage_batch = pa.RecordBatch.from_arrays(columns, schema=self._write_schema)
        for offset in range(0, storage_batch.num_rows, self._chunk_rows):
            chunk = storage_batch.slice(offset, self._chunk_rows)
            encoded = _encode_rows(chunk)
            self._pending.append(encoded)
            self._pending_rows += chunk.num_rows
            self._pending_bytes += len(encoded)
            if self._pending_bytes >= self._block_bytes:
                self._write_block()
        self._rows += batch.num_rows

    def _write_block(self) -> None:
        if self._pending_rows:
            self._avro.write_block(_EncodedBlock(self._pending_rows, b"".join(self._pending)))
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def finish(self) -> ChannelStateRef:
        """Flush, and return an inline ref or (after write-then-rename) a file ref."""
        self._start()
        assert self._stream is not None
        try:
            self._write_block()
            self._avro.flush()
            common = {
                "barrier_id": self._barrier_id,
                "task_index": self._task_index,
                "query_id": self._query_id,
                "write_id": self._write_id,
                "row_count": self._rows,
                "byte_size": self._stream.bytes_written,
                "crc32": self._stream.crc32,
            }
            if not self._stream.spilled:
                ref: ChannelStateRef = InlineChannelState(
                    inline_avro=self._stream.memory_value(), **common
                )
            else:
                self._stream.close_file()
                assert self._temp is not None
                final = self._barrier_location().child(state_file_name(self._task_index))
                final.filesystem.move(self._temp.path, final.path)
                ref = FileChannelState(path=final.path, uri=final.uri, **common)
        except BaseException:
            self.discard()
            raise
        self._closed = True
        self._stream = None
        logger.info(
            "finished %s: %d rows, %d bytes, %s", self.describe(), ref.row_count,
            ref.byte_size, ref.where()
        )
        return ref

    def discard(self) -> None:
        """Drop everything written (removes the temporary file); idempotent. After
        :meth:`finish` it does nothing: the finished state belongs to its ref."""
        if self._closed and self._stream is None:
            return
        self._closed = True
        stream, self._stream, self._avro = self._stream, None, None
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        if stream is not None:
            try:
                stream.close_file()
            finally:
                if self._temp is not None:
                    try:
                        self._temp.filesystem.delete_file(self._temp.path)
                    except FileNotFoundError:
                        pass

    def __enter__(self) -> "ChannelStateWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.discard()


# --- reader ---------------------------------------------------------------------------------------


def _open_source(ref: ChannelStateRef, filesystem: pafs.FileSystem | None) -> Any:
    """A readable, seekable file over the state's Avro bytes, after checking their size and
    CRC-32 against the ref (a streaming pass over a file: memory stays bounded)."""
    if isinstance(ref, InlineChannelState):
        source: Any = io.BytesIO(ref.inline_avro)
    elif isinstance(ref, FileChannelState):
        location = ref.location(filesystem)
        try:
            # fastavro's block reader asks tell(): a random-access file, not a stream.
            source = location.filesystem.open_input_file(location.path)
        except FileNotFoundError as exc:
            raise ChannelStateError(f"{ref.describe()} is missing") from exc
        except OSError as exc:
            raise ChannelStateError(f"{ref.describe()} cannot be opened: {exc}") from exc
    else:
        raise TypeError(f"not a channel state reference: {ref!r}")
    try:
        size, crc = 0, 0
        while chunk := source.read(_CHECK_CHUNK_BYTES):
            size += len(chunk)
            crc = zlib.crc32(chunk, crc)
        if size != ref.byte_size:
            raise ChannelStateError(
                f"{ref.describe()} is truncated or altered: {size} bytes, expected {ref.byte_size}"
            )
        source.seek(0)
        if crc != ref.crc32:
            raise ChannelStateError(f"{ref.describe()} {_crc_mismatch(ref, source)}")
    except OSError as exc:
        source.close()
        raise ChannelStateError(f"{ref.describe()} cannot be read: {exc}") from exc
    except BaseException:
        source.close()
        raise
    return source


def _crc_mismatch(ref: ChannelStateRef, source: Any) -> str:
    """Why the CRC-32 differs: another writer's file in its place, or damage."""
    try:
        write_id = fastavro.block_reader(source).metadata.get(META_WRITE_ID)
    except _DECODE_ERRORS:
        write_id = None
    if write_id is not None and write_id != ref.write_id:
        return (
            f"was replaced by another writer (write id {write_id!r}, expected {ref.write_id!r}; "
            "another attempt of the task?)"
        )
    return "is corrupt: CRC-32 mismatch"


def _check_header(ref: ChannelStateRef, metadata: dict[str, str]) -> pa.Schema:
    def expect(key: str, wanted: object, what: str) -> None:
        found = metadata.get(key)
        if found != str(wanted):
            raise ChannelStateError(
                f"{ref.describe()}: header {what} is {found!r}, expected {wanted!r}"
            )

    expect(META_FORMAT_VERSION, FORMAT_VERSION, "format version")
    expect(META_SCHEMA_VERSION, SCHEMA_VERSION, "schema version")
    expect(META_BARRIER_ID, ref.barrier_id, "barrier id")
    expect(META_TASK_INDEX, ref.task_index, "task index")
    expect(META_QUERY_ID, ref.query_id, "query id")
    expect(META_WRITE_ID, ref.write_id, "write id (replaced by another attempt?)")
    try:
        return _decode_arrow_schema(metadata[META_ARROW_SCHEMA])
    except (KeyError, ValueError, binascii.Error, pa.ArrowException) as exc:
        raise ChannelStateError(f"{ref.describe()}: header has no readable Arrow schema") from exc


def _to_batch(rows: list[Any], read_schema: pa.Schema, schema: pa.Schema) -> pa.RecordBatch:
    storage = pa.RecordBatch.from_pylist(rows, schema=read_schema)
    columns = [
        col if col.type == field.type else col.view(field.type)
        for col, field in zip(storage.columns, schema)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_DECODE_ERRORS = (EOFError, ValueError, KeyError, TypeError, IndexError, OSError, zlib.error)


def _open_validated(
    ref: ChannelStateRef,
    filesystem: pafs.FileSystem | None,
    expected_schema: pa.Schema | None,
) -> tuple[Any, Any, pa.Schema]:
    """Open the state, check its size and header: (stream, fastavro block reader, schema)."""
    source = _open_source(ref, filesystem)
    try:
        try:
            blocks = fastavro.block_reader(source)
            metadata = dict(blocks.metadata)
        except _DECODE_ERRORS as exc:
            raise ChannelStateError(f"{ref.describe()}: unreadable Avro header: {exc!r}") from exc
        schema = _check_header(ref, metadata)
        if expected_schema is not None and not expected_schema.equals(schema):
            raise ChannelStateError(
                f"{ref.describe()}: stored schema {schema} differs from the sink input's "
                f"{expected_schema}"
            )
    except BaseException:
        source.close()
        raise
    return source, blocks, schema


def read_channel_state(
    ref: ChannelStateRef,
    *,
    batch_rows: int,
    filesystem: pafs.FileSystem | None = None,
    expected_schema: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the state's rows from ``ref.start_row`` on, in the order they were appended, as
    RecordBatches of at most ``batch_rows`` rows with the exact Arrow schema of the input.

    Size, CRC-32 and header are checked before this returns (a missing, truncated or damaged
    file or a wrong header raise ChannelStateError here); the row count is checked when the
    iteration ends.
    A caller that stops early and wrote ``n`` of the yielded rows carries the rest forward with
    ``ref.advanced(n)``. ``expected_schema``, when given, must equal the stored schema.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    source, blocks, schema = _open_validated(ref, filesystem, expected_schema)
    return _iter_batches(ref, source, blocks, schema, batch_rows)


def _iter_batches(
    ref: ChannelStateRef, source: Any, blocks: Any, schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    read_schema = _storage_schema(schema, for_read=True)
    to_skip = ref.start_row
    seen = 0
    rows: list[Any] = []
    try:
        iterator = iter(blocks)
        while True:
            try:
                block = next(iterator, None)
                if block is None:
                    break
                seen += block.num_records
                if seen > ref.row_count:
                    raise ChannelStateError(
                        f"{ref.describe()} holds more than the {ref.row_count} rows of its ref"
                    )
                if to_skip >= block.num_records:
                    to_skip -= block.num_records
                    continue
                records = list(block)
            except _DECODE_ERRORS as exc:
                raise ChannelStateError(f"{ref.describe()} is corrupt: {exc!r}") from exc
            rows.extend(records[to_skip:])
            to_skip = 0
            while len(rows) >= batch_rows:
                chunk, rows = rows[:batch_rows], rows[batch_rows:]
                yield _to_batch(chunk, read_schema, schema)
        if seen != ref.row_count:
            raise ChannelStateError(
                f"{ref.describe()} is truncated: {seen} rows, expected {ref.row_count}"
            )
        if rows:
            yield _to_batch(rows, read_schema, schema)
    finally:
        source.close()


def read_all(ref: ChannelStateRef, *, filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """Every remaining row of ``ref`` as one Table (tests and tools; replay streams instead)."""
    source, blocks, schema = _open_validated(ref, filesystem, None)
    batches = list(_iter_batches(ref, source, blocks, schema, 64 * 1024))
    return pa.Table.from_batches(batches, schema=schema)
