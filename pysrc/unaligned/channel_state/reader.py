"""Channel state replay: the rows a ref points at, in order, after every check of the file.

:func:`read_channel_state` yields the rows a :class:`~unaligned.channel_state.refs.ChannelStateRef`
points at, from its ``start_row`` on. Before the first row, the file format's checks run
(:func:`unaligned.channel_state.format.open_validated`: size and CRC-32 of the Avro bytes by a
streaming pass, memory bounded; then the header). When the iteration ends: the row count.
Anything wrong (missing or truncated file, another writer's file, wrong header, undecodable
block, fewer or more rows than the ref says) raises ChannelStateError naming the file (or
"inline state") and the barrier; rows are never skipped. The file layout and its header are
:mod:`unaligned.channel_state.format`.

Memory: one decoded Avro block plus at most ``batch_rows`` rows. Blocks wholly before
``start_row`` (rows a carried-forward ref already wrote) are read but not decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from unaligned.channel_state.avro_rows import records_to_batch, storage_schema
from unaligned.channel_state.format import DECODE_ERRORS, open_validated
from unaligned.channel_state.refs import ChannelStateRef
from unaligned.errors import ChannelStateError

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
    stored schema. ``filesystem``, when given, is where a file ref's path is opened; a file
    ref written without a URI needs the one its writer was handed.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    source, blocks, schema = open_validated(ref, filesystem, expected_schema)
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
            except DECODE_ERRORS as exc:
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
    source, blocks, schema = open_validated(ref, filesystem, None)
    batches = list(_iter_batches(ref, source, blocks, schema, 64 * 1024))
    return pa.Table.from_batches(batches, schema=schema)
