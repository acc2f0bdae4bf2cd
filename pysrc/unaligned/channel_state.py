"""Channel state: the sink input rows a task snapshots when it cuts at an unaligned barrier.

Flink (FLIP-76) persists in-flight buffers with the checkpoint when a barrier overtakes them.
Here a sink task that passes ``alignedCheckpointTimeout`` stops writing to the external system,
drains the rest of its input into channel state with a :class:`ChannelStateWriter`, and returns
a :class:`ChannelStateRef` in its commit message. The next batch's task with the same index
replays the state (:func:`read_channel_state`) before its own input.

Format
    An Avro object container file (fastavro) over the sink's input rows; the Avro schema and
    the row encoding are :mod:`unaligned.avro_rows`, the header (exact Arrow schema, barrier,
    task, query and write id) and its checks are :mod:`unaligned.channel_state_reader`.
    Codecs: ``null`` and ``deflate`` are built in; ``snappy`` needs ``cramjam`` (or
    ``python-snappy``); ``zstandard`` needs ``backports.zstd`` (Python < 3.14).

Inline or file (Flink's data-inline-threshold)
    The writer keeps the Avro bytes in memory while they stay within
    ``inline_threshold_bytes``; :meth:`ChannelStateWriter.finish` then returns an
    :class:`InlineChannelState` that travels in the commit record. Once the bytes pass the
    threshold the writer opens a file, writes what it has, and streams every further Avro
    block to it: memory stays within the threshold plus one block (``block_bytes``, before
    compression) plus one chunk of rows (``chunk_rows``).

Files and naming
    One file per (barrier, task): ``<state_dir>/barrier-<barrierId>/task-<index>.avro``,
    written as ``task-<index>.attempt-<attempt>.avro.tmp`` and renamed by
    :meth:`~ChannelStateWriter.finish`, so nobody sees half a file. Only the committed
    attempt's ref is in the sink's commit record; a retried attempt overwrites the final file
    before returning its own ref. Every ref carries the writer's ``write_id`` and the size and
    CRC-32 of the Avro bytes, so a file replaced after its ref was handed out (e.g. by a
    speculative duplicate attempt) fails replay with
    :class:`~unaligned.errors.ChannelStateError` instead of replaying other rows. Temporary
    files of failed attempts stay until the sink's cleanup removes them
    (:func:`list_state_files`, :func:`delete_barrier_state`).

Carry-forward by reference
    ``start_row`` is the position replay starts from (the first row not yet written). If a
    replay times out again, ``ref.advanced(rows_written)`` refers to the same file (or inline
    bytes) with a later ``start_row``; nothing is rewritten. ``barrier_id`` stays the barrier
    that wrote the state, whichever later barrier carries the ref. A file may be deleted only
    when no committed ref points at it any more.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
import logging
import re
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Iterable

import fastavro
import fastavro.write
import pyarrow as pa
import pyarrow.fs as pafs

from unaligned.avro_rows import (  # noqa: F401 (CODECS, check_codec re-exported)
    CODECS,
    EncodedBlock,
    avro_schema,
    check_codec,
    encode_rows,
    storage_schema,
    view_as,
)
from unaligned.barrier import Location, resolve_location
# The header constants and the reader are re-exported: this module is the public entry point.
from unaligned.channel_state_reader import (  # noqa: F401
    FORMAT_VERSION,
    META_ARROW_SCHEMA,
    META_BARRIER_ID,
    META_FORMAT_VERSION,
    META_QUERY_ID,
    META_SCHEMA_VERSION,
    META_TASK_INDEX,
    META_WRITE_ID,
    SCHEMA_VERSION,
    read_all,
    read_channel_state,
    state_header,
)
from unaligned.errors import ChannelStateError, SchemaMismatchError

logger = logging.getLogger(__name__)

DEFAULT_INLINE_THRESHOLD_BYTES = 20 * 1024  # Flink's state.storage.fs.memory-threshold
DEFAULT_BLOCK_BYTES = 256 * 1024
DEFAULT_CHUNK_ROWS = 4096

_ATTEMPT = re.compile(r"^[A-Za-z0-9_-]+$")
_FINAL_NAME = re.compile(r"^task-(\d+)\.avro$")
_TEMP_NAME = re.compile(r"^task-(\d+)\.attempt-([A-Za-z0-9_-]+)\.avro\.tmp$")
_BARRIER_DIR = re.compile(r"^barrier-(\d+)$")


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

    def open_input(self, filesystem: pafs.FileSystem | None = None) -> Any:
        """A random-access readable file over the state's Avro bytes, not yet checked
        (:func:`read_channel_state` checks them); ChannelStateError if it cannot be opened."""
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

    def open_input(self, filesystem: pafs.FileSystem | None = None) -> Any:
        return io.BytesIO(self.inline_avro)


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

    def open_input(self, filesystem: pafs.FileSystem | None = None) -> Any:
        location = self.location(filesystem)
        try:
            # fastavro's block reader asks tell(): a random-access file, not a stream.
            return location.filesystem.open_input_file(location.path)
        except FileNotFoundError as exc:
            raise ChannelStateError(f"{self.describe()} is missing") from exc
        except OSError as exc:
            raise ChannelStateError(f"{self.describe()} cannot be opened: {exc}") from exc


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
        self._write_schema = storage_schema(schema, for_read=False)
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
        metadata = state_header(
            barrier_id=self._barrier_id,
            query_id=self._query_id,
            task_index=self._task_index,
            write_id=self._write_id,
            schema=self._schema,
        )
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
        storage_batch = view_as(batch, self._write_schema)
        for offset in range(0, storage_batch.num_rows, self._chunk_rows):
            chunk = storage_batch.slice(offset, self._chunk_rows)
            encoded = encode_rows(chunk)
            self._pending.append(encoded)
            self._pending_rows += chunk.num_rows
            self._pending_bytes += len(encoded)
            if self._pending_bytes >= self._block_bytes:
                self._write_block()
        self._rows += batch.num_rows

    def _write_block(self) -> None:
        if self._pending_rows:
            self._avro.write_block(EncodedBlock(self._pending_rows, b"".join(self._pending)))
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
