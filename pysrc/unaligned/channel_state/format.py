"""The channel-state file format: its header, and every check made before a row is replayed.

One task's state at one barrier is an Avro object container file (fastavro), inline in the
commit record or in a file (:mod:`unaligned.channel_state.refs`); rows and their Avro schema are
:mod:`unaligned.channel_state.avro_rows`. :func:`state_header` builds the header metadata
(versions, barrier, query, task, write id, the exact Arrow schema); :func:`open_validated`
checks size and CRC-32, the header and the schema before the first row is replayed, and raises
:class:`~unaligned.errors.ChannelStateError` naming the file and the barrier. The header keys
and the order of the checks: ARCHITECTURE.md, "Module notes", ``channel_state/format.py``.
"""

from __future__ import annotations

import binascii
import zlib
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs

from unaligned.channel_state.avro_rows import decode_arrow_schema, encode_arrow_schema
from unaligned.channel_state.refs import ChannelStateRef
from unaligned.errors import ChannelStateError

FORMAT_VERSION = 1
SCHEMA_VERSION = 1
META_FORMAT_VERSION = "unaligned.channel_state.format_version"
META_SCHEMA_VERSION = "unaligned.channel_state.schema_version"
META_BARRIER_ID = "unaligned.barrier_id"
META_QUERY_ID = "unaligned.query_id"
META_TASK_INDEX = "unaligned.task_index"
META_WRITE_ID = "unaligned.write_id"
META_ARROW_SCHEMA = "unaligned.arrow_schema"

#: What fastavro raises on bytes that are not the Avro it expects.
DECODE_ERRORS = (EOFError, ValueError, KeyError, TypeError, IndexError, OSError, zlib.error)
_CHECK_CHUNK_BYTES = 1 << 20


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


def check_header(ref: ChannelStateRef, metadata: dict[str, str]) -> pa.Schema:
    """The stored Arrow schema, after checking the header against ``ref``."""

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


# --- size and CRC-32 ------------------------------------------------------------------------------


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
    except DECODE_ERRORS:
        write_id = None
    if write_id is not None and write_id != ref.write_id:
        return (
            f"was replaced by another writer (write id {write_id!r}, expected {ref.write_id!r}; "
            "another attempt of the task?)"
        )
    return "is corrupt: CRC-32 mismatch"


# --- everything before the first row --------------------------------------------------------------


def open_validated(
    ref: ChannelStateRef,
    filesystem: pafs.FileSystem | None,
    expected_schema: pa.Schema | None,
) -> tuple[Any, Any, pa.Schema]:
    """Open the state and run checks 1-4 of the module docstring: (the open stream, which the
    caller closes; fastavro's block reader over it; the stored Arrow schema)."""
    source = _open_source(ref, filesystem)
    try:
        try:
            blocks = fastavro.block_reader(source)
            metadata = dict(blocks.metadata)
        except DECODE_ERRORS as exc:
            raise ChannelStateError(f"{ref.describe()}: unreadable Avro header: {exc!r}") from exc
        schema = check_header(ref, metadata)
        if expected_schema is not None and not expected_schema.equals(schema):
            raise ChannelStateError(
                f"{ref.describe()}: stored schema {schema} differs from the sink input's "
                f"{expected_schema}"
            )
    except BaseException:
        source.close()
        raise
    return source, blocks, schema


def read_stored_schema(
    ref: ChannelStateRef, filesystem: pafs.FileSystem | None = None
) -> pa.Schema:
    """The Arrow schema in the state's header, after checks 2 and 3 (the header only, no CRC
    pass over the whole file: for a check before a batch runs, never instead of replay's)."""
    source = ref.open_input(filesystem)
    try:
        try:
            metadata = dict(fastavro.block_reader(source).metadata)
        except DECODE_ERRORS as exc:
            raise ChannelStateError(f"{ref.describe()}: unreadable Avro header: {exc!r}") from exc
        return check_header(ref, metadata)
    finally:
        source.close()
