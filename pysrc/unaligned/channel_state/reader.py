"""Channel state replay: the rows a ref points at, in order, after every check of the file.

:func:`read_channel_state` yields the rows a :class:`~unaligned.channel_state.refs.ChannelStateRef`
points at, from its ``start_row`` on. Before the first row, the file format's checks run
(:func:`unaligned.channel_state.format.open_validated`: size and CRC-32 of the Avro bytes by a
streaming pass, memory bounded; then the header). When the iteration ends: the row count.
Anything wrong (missing or truncated file, another writer's file, wrong header, undecodable
block, fewer or more rows than the ref says) raises ChannelStateError naming the file (or
"inline state") and the barrier; rows are never skipped. The file layout and its header are
:mod:`unaligned.channel_state.format`.

Changed sink input: with ``target_schema`` (the sink's current input schema) the rows come in
that schema, mapped by column name from the stored one
(:mod:`unaligned.channel_state.replay_schema`); a change replay cannot bridge raises
:class:`~unaligned.errors.SchemaMismatchError` before the first row.

Memory: one decoded Avro block plus at most ``batch_rows`` rows. Blocks wholly before
``start_row`` (rows a carried-forward ref already wrote) are read but not decoded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from unaligned.channel_state.avro_rows import records_to_batch, storage_schema
from unaligned.channel_state.format import DECODE_ERRORS, open_validated, read_stored_schema
from unaligned.channel_state.refs import ChannelStateRef
from unaligned.channel_state.replay_schema import ReplayMapping, plan_replay
from unaligned.errors import ChannelStateError

# --- reading --------------------------------------------------------------------------------------


def read_channel_state(
    ref: ChannelStateRef,
    *,
    batch_rows: int,
    filesystem: pafs.FileSystem | None = None,
    expected_schema: pa.Schema | None = None,
    target_schema: pa.Schema | None = None,
    sink_columns: Collection[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the state's rows from ``ref.start_row`` on, in the order they were appended, as
    RecordBatches of at most ``batch_rows`` rows with the exact Arrow schema of the input.

    Size, CRC-32 and header are checked before this returns; the row count when the
    iteration ends. A caller that stops early and wrote ``n`` of the yielded rows carries the
    rest forward with ``ref.advanced(n)``. ``expected_schema``, when given, must equal the
    stored schema. ``filesystem``, when given, is where a file ref's path is opened; a file
    ref written without a URI needs the one its writer was handed.

    ``target_schema``, when given, is the sink's current input schema: the rows are yielded in
    it, mapped by column name (``sink_columns``: the columns the sink writes, see
    :func:`~unaligned.channel_state.replay_schema.plan_replay`); SchemaMismatchError before
    the first row if the stored rows do not fit it.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    source, blocks, schema = open_validated(ref, filesystem, expected_schema)
    mapping = None
    if target_schema is not None:
        try:
            mapping = plan_replay(
                schema, target_schema, where=ref.describe(), sink_columns=sink_columns
            )
        except BaseException:
            source.close()
            raise
    return _iter_batches(ref, source, blocks, schema, batch_rows, mapping)


def _iter_batches(
    ref: ChannelStateRef,
    source: Any,
    blocks: Any,
    schema: pa.Schema,
    batch_rows: int,
    mapping: ReplayMapping | None = None,
) -> Iterator[pa.RecordBatch]:
    def out(records: list[Any]) -> pa.RecordBatch:
        batch = records_to_batch(records, read_schema, schema)
        return batch if mapping is None else mapping.apply(batch)

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
                yield out(chunk)
        if seen != ref.row_count:
            raise ChannelStateError(
                f"{ref.describe()} is truncated: {seen} rows, expected {ref.row_count}"
            )
        if rows:
            yield out(rows)
    finally:
        source.close()


def read_all(ref: ChannelStateRef, *, filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """Every remaining row of ``ref`` as one Table (tests and tools; replay streams instead)."""
    source, blocks, schema = open_validated(ref, filesystem, None)
    batches = list(_iter_batches(ref, source, blocks, schema, 64 * 1024))
    return pa.Table.from_batches(batches, schema=schema)


def check_replayable(
    refs: Iterable[ChannelStateRef],
    target_schema: pa.Schema,
    *,
    sink_columns: Collection[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> None:
    """SchemaMismatchError if any of ``refs`` cannot be replayed into ``target_schema`` (the
    sink's current input); reads only the headers. For the driver, before a batch's tasks run,
    so that a changed query stops at once with the way out instead of failing every task."""
    for ref in refs:
        if ref.exhausted:
            continue
        plan_replay(
            read_stored_schema(ref, filesystem),
            target_schema,
            where=ref.describe(),
            sink_columns=sink_columns,
        )
