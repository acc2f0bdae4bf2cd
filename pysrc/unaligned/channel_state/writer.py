"""Writing channel state: :class:`ChannelStateWriter` streams one task's rows at a barrier to Avro.

A sink task that cuts at an unaligned barrier drains the rest of its input into a writer and
puts the :class:`~unaligned.channel_state.refs.ChannelStateRef` that
:meth:`~ChannelStateWriter.finish` returns into its commit message; the next batch's task
replays it (:func:`~unaligned.channel_state.reader.read_channel_state`). Small state stays
inline in the commit record; past ``inline_threshold_bytes`` the writer streams to a file under
a name unique to the attempt and the write, renamed into place when it finishes. Format,
codecs, memory bound and files: ARCHITECTURE.md, "Module notes", ``channel_state/writer.py``.
"""

from __future__ import annotations

import io
import logging
import uuid
import zlib
from typing import IO, Any, TypedDict, cast

import fastavro
import fastavro.write
import pyarrow as pa
import pyarrow.fs as pafs

from unaligned._util.fs import Location, resolve_location
from unaligned.channel_state.avro_rows import (
    EncodedBlock,
    avro_schema,
    encode_rows,
    storage_schema,
    view_as,
)
from unaligned.channel_state.codecs import check_codec
from unaligned.channel_state.files import (
    ATTEMPT_NAME,
    barrier_dir_name,
    state_file_name,
    temp_file_name,
)
from unaligned.channel_state.format import state_header
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState, InlineChannelState
from unaligned.errors import ChannelStateError, SchemaMismatchError

logger = logging.getLogger(__name__)

DEFAULT_INLINE_THRESHOLD_BYTES = 20 * 1024  # Flink's state.storage.fs.memory-threshold
DEFAULT_BLOCK_BYTES = 256 * 1024
DEFAULT_CHUNK_ROWS = 4096


class _RefFields(TypedDict):
    """The fields every :class:`ChannelStateRef` the writer returns shares."""

    barrier_id: int
    task_index: int
    query_id: str
    write_id: str
    row_count: int
    byte_size: int
    crc32: int


class _SpillingStream:
    """The file-like object fastavro writes to: memory until ``threshold`` bytes would be
    passed, then the temporary file (opened by ``open_file``) with what memory held.

    Not a full ``IO``: fastavro's writer calls only ``write``, ``flush``, ``tell``,
    ``seekable`` and ``readable`` on it."""

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

    ``attempt`` goes into the file's names ([A-Za-z0-9_-]+, e.g. Spark's ``taskAttemptId``),
    next to the writer's random ``write_id``; ``state_dir`` is the query's own directory
    (:func:`unaligned.channel_state.files.query_state_dir`).
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
        if not ATTEMPT_NAME.match(attempt):
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
        self._temp = barrier.child(temp_file_name(self._task_index, self._attempt, self._write_id))
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
            cast(IO[bytes], self._stream),  # the subset of IO fastavro uses (see the class)
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
        for column, field in zip(batch.columns, batch.schema, strict=True):
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
            common: _RefFields = {
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
                final = self._barrier_location().child(
                    state_file_name(self._task_index, self._attempt, self._write_id)
                )
                final.filesystem.move(self._temp.path, final.path)
                ref = FileChannelState(path=final.path, uri=final.uri, **common)
        except BaseException:
            self.discard()
            raise
        self._closed = True
        self._stream = None
        logger.info(
            "finished %s: %d rows, %d bytes, %s",
            self.describe(),
            ref.row_count,
            ref.byte_size,
            ref.where(),
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

    def __enter__(self) -> ChannelStateWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.discard()
