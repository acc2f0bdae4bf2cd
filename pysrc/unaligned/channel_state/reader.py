"""Channel state replay, and the state's header (written by ChannelStateWriter, checked here).

:func:`read_channel_state` yields the rows a :class:`~unaligned.channel_state.refs.ChannelStateRef`
points at, from its ``start_row`` on. Before the first row: the size and CRC-32 of the Avro
bytes are checked against the ref by a streaming pass (memory stays bounded), then the header.
When the iteration ends: the row count. Anything wrong (missing or truncated file, another
writer's file, wrong header, undecodable block, fewer or more rows than the ref says) raises
ChannelStateError naming the file (or "inline state") and the barrier; rows are never skipped.

Header metadata (all strings)::

    unaligned.channel_state.format_version  "1"   layout of this header
    unaligned.channel_state.schema_version  "1"   the Arrow -> Avro mapping rules (avro_rows)
    unaligned.barrier_id / query_id / task_index  whose snapshot this is
    unaligned.write_id                      random id of the one writer that wrote the state
    unaligned.arrow_schema                  base64 of the Arrow IPC schema
"""

from __future__ import annotations

import binascii
import logging
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs

from unaligned.channel_state.avro_rows import (
    decode_arrow_schema,
    encode_arrow_schema,
    records_to_batch,
    storage_schema,
)
from unaligned.errors import ChannelStateError

if TYPE_CHECKING:
    from unaligned.channel_state.refs import ChannelStateRef

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

_CHECK_CHUNK_BYTES = 1 << 20
_DECODE_ERRORS = (EOFError, ValueError, KeyError, TypeError, IndexError, OSError, zlib.error)


# --- header ---------------------------------------------------------------------------------------


def state_header(
    *, barrier_id: int, query_id: str, task_index: int, write_id: str, schema: pa.Schema
) -> dict[str, str]:
    """The Avro header metadata of one writer's state (the layout in the module docstring)."""
    return {
        META_FORMAT_VERSION: str(FORMAT_VERSION),
        META_SCHEMA_VERSION: str(SCHEMA_VERSION),
        META_BARRIER_ID: str(barrier_id),
        META_QUERY_ID: query_id,
        META_TASK_INDEX: str(task_index),
        META_WRITE_ID: write_id,
        META_ARROW_SCHEMA: encode_arrow_schema(schema),
    }


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
        return decode_arrow_schema(metadata[META_ARROW_SCHEMA])
    except (KeyError, ValueError, binascii.Error, pa.ArrowException) as exc:
        raise ChannelStateError(f"{ref.describe()}: header has no readable Arrow schema") from exc


# --- validation -----------------------------------------------------------------------------------


def _open_source(ref: ChannelStateRef, filesystem: pafs.FileSystem | None) -> Any:
    """A readable, seekable file over the state's Avro bytes, after checking their size and
    CRC-32 against the ref."""
    source = ref.open_input(filesystem)
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


# --- reading --------------------------------------------------------------------------------------


def read_channel_state(
    ref: ChannelStateRef,
    *,
    batch_rows: int,
    filesystem: pafs.FileSystem | None = None,
    expected_schema: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the state's rows from ``ref.start_row`` on, in the order they were appended, as
    RecordBatches of at most ``batch_rows`` rows with the exact Arrow schema of the input.

    Size, CRC-32 and header are checked before this returns; the row count when the
    iteration ends. A caller that stops early and wrote ``n`` of the yielded rows carries the
    rest forward with ``ref.advanced(n)``. ``expected_schema``, when given, must equal the
    stored schema.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    source, blocks, schema = _open_validated(ref, filesystem, expected_schema)
    return _iter_batches(ref, source, blocks, schema, batch_rows)


def _iter_batches(
    ref: ChannelStateRef, source: Any, blocks: Any, schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    read_schema = storage_schema(schema, for_read=True)
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
                yield records_to_batch(chunk, read_schema, schema)
        if seen != ref.row_count:
            raise ChannelStateError(
                f"{ref.describe()} is truncated: {seen} rows, expected {ref.row_count}"
            )
        if rows:
            yield records_to_batch(rows, read_schema, schema)
    finally:
        source.close()


def read_all(ref: ChannelStateRef, *, filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """Every remaining row of ``ref`` as one Table (tests and tools; replay streams instead)."""
    source, blocks, schema = _open_validated(ref, filesystem, None)
    batches = list(_iter_batches(ref, source, blocks, schema, 64 * 1024))
    return pa.Table.from_batches(batches, schema=schema)
