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
    file before returning its own ref. Every ref carries the writer's ``write_id`` and the file
    size; a file replaced after its ref was handed out (e.g. by a speculative duplicate
    attempt that finished after the committed one) fails replay with
    :class:`~unaligned.errors.ChannelStateError` instead of replaying other rows. Temporary
    files of failed attempts stay until the sink's cleanup removes them
    (:func:`list_state_files`, :func:`delete_barrier_state`).

Carry-forward by reference
    ``start_row`` is the position replay starts from (the first row not yet written).
    If a replay times out again, ``ref.advanced(rows_written)`` refers to the same file (or
    inline bytes) with a later ``start_row``; nothing is rewritten. ``barrier_id`` stays the
    barrier that wrote the state, whichever later barrier carries the ref. A file may be
    deleted only when no committed ref points at it any more.

Corrupt or missing state (missing or truncated file, wrong header, wrong barrier, task, query
or write id, bad inline bytes, fewer or more rows than the ref says) raises ChannelStateError
naming the file (or "inline state") and the barrier. Rows are never skipped.
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
import pyarrow as pa
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
DEFAULT_CHUNK_ROWS = 1024

_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ATTEMPT = re.compile(r"^[A-Za-z0-9_-]+$")
_FINAL_NAME = re.compile(r"^task-(\d+)\.avro$")
_TEMP_NAME = re.compile(r"^task-(\d+)\.attempt-([A-Za-z0-9_-]+)\.avro\.tmp$")
_BARRIER_DIR = re.compile(r"^barrier-(\d+)$")


# --- codecs ------------------------------------------------------------------------------------


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


# --- Arrow <-> Avro schema -------------------------------------------------------------------


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


# --- references -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ChannelStateRef:
    """Where one task's channel state of one barrier is, and where replay starts.

    ``barrier_id``, ``task_index``, ``query_id`` and ``write_id`` identify the snapshot and
    must match the state's header. ``row_count`` is the total number of rows in the state,
    ``byte_size`` the size of its Avro bytes. ``start_row`` is the first row replay yields
    (rows before it were already written); ``0 <= start_row <= row_count``.
    """

    barrier_id: int
    task_index: int
    query_id: str
    write_id: str
    row_count: int
    byte_size: int
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
            for name in ("barrier_id", "task_index", "row_count", "byte_size", "start_row"):
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


# --- naming -------------------------------------------------------------------------------------


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
    """Remove ``barrier-<id>/`` with every file in it (finished and stale); idempotent."""
    location = resolve_location(state_dir, filesystem).child(barrier_dir_name(barrier_id))
    try:
        location.filesystem.delete_dir(location.path)
    except FileNotFoundError:
        pass


# --- writer -------------------------------------------------------------------------------------


class _SpillingStream:
    """The file-like object fastavro writes to: memory until ``threshold`` bytes would be
    passed, then the temporary file (opened by ``open_file``) with what memory held."""

    def __init__(self, threshold: int, open_file: Any) -> None:
        self._threshold = threshold
        self._open_file = open_file
        self._memory: io.BytesIO | None = io.BytesIO()
        self._file: Any = None
        self.bytes_written = 0

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
        """Avro bytes held in memory for a possible inline result (0 once spilled to a file)."""
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
        self._start()
        columns = [
            col if col.type == storage.type else col.view(storage.type)
            for col, storage in zip(batch.columns, self._write_schema)
        ]
        storage_batch = pa.RecordBatch.from_arrays(columns, schema=self._write_schema)
        write = self._avro.write
        for offset in range(0, storage_batch.num_rows, self._chunk_rows):
            for record in storage_batch.slice(offset, self._chunk_rows).to_pylist():
                write(record)
        self._rows += batch.num_rows

    def finish(self) -> ChannelStateRef:
        """Flush, and return an inline ref or (after write-then-rename) a file ref."""
        self._start()
        assert self._stream is not None
        try:
            self._avro.flush()
            common = {
                "barrier_id": self._barrier_id,
                "task_index": self._task_index,
                "query_id": self._query_id,
                "write_id": self._write_id,
                "row_count": self._rows,
                "byte_size": self._stream.bytes_written,
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


# --- reader -------------------------------------------------------------------------------------


def _open_source(
    ref: ChannelStateRef, filesystem: pafs.FileSystem | None
) -> tuple[Any, int]:
    """A readable stream over the state's Avro bytes, and their size."""
    if isinstance(ref, InlineChannelState):
        return io.BytesIO(ref.inline_avro), len(ref.inline_avro)
    if not isinstance(ref, FileChannelState):
        raise TypeError(f"not a channel state reference: {ref!r}")
    location = ref.location(filesystem)
    try:
        info = location.filesystem.get_file_info(location.path)
        if info.type != pafs.FileType.File:
            raise ChannelStateError(f"{ref.describe()} is missing")
        # fastavro's block reader asks tell(): a random-access file, not a stream.
        stream = location.filesystem.open_input_file(location.path)
    except FileNotFoundError as exc:
        raise ChannelStateError(f"{ref.describe()} is missing") from exc
    except OSError as exc:
        raise ChannelStateError(f"{ref.describe()} cannot be opened: {exc}") from exc
    return stream, info.size


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
    source, size = _open_source(ref, filesystem)
    try:
        if size != ref.byte_size:
            raise ChannelStateError(
                f"{ref.describe()} is truncated or altered: {size} bytes, expected {ref.byte_size}"
            )
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

    The header and size are checked before this returns (missing file, truncated file, wrong
    header raise ChannelStateError here); the row count is checked when the iteration ends.
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
