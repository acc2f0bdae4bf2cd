"""Encoding Kafka v2 record batches (magic 2) straight from Arrow columns, fast.

The mirror image of :mod:`unaligned.kafka.records.record_decoder`: kafka-python builds a batch
record by record in Python (``DefaultRecordBatchBuilder.append``); :func:`encode_record_batches`
computes every record's field sizes and positions column-wise with numpy and scatters the key, value
and header bytes out of the Arrow buffers, so keys and values never become Python objects. Python
loops run only over batches (split, header, codec, CRC), never over records or headers.

This module reads the Arrow columns and splits the rows into batches; the wire layout of a batch
and the writing of it are in :mod:`unaligned.kafka.records.record_batch_layout`.

Splitting (:func:`encode_record_batches`): rows go into batches in order; a batch takes rows while
its uncompressed size (header included) stays within ``batch_size`` (and ``max_request_size``), as
kafka-python's and Java's producers bound ``batch.size``; a single row larger than that gets a
batch of its own, and a row whose batch would exceed ``max_request_size`` raises
``kafka.errors.MessageSizeTooLargeError`` (what ``KafkaProducer.send`` raises for it).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kafka.errors import MessageSizeTooLargeError

from unaligned._util.arrow import valid_rows
from unaligned.errors import SchemaMismatchError
from unaligned.kafka.records.record_batch_layout import (
    HEADER_SIZE,
    ByteColumn,
    HeaderEntries,
    ProducerState,
    RecordColumns,
    encode_records,
    usable_codec_id,
    varint_sizes,
    zigzag,
)

DEFAULT_BATCH_SIZE = 16_384
DEFAULT_MAX_REQUEST_SIZE = 1_048_576
_GROUP_ROWS = 8_192
#: Offset deltas (a record's position in its batch) below these take one and two varint bytes.
_ONE_BYTE_OFFSETS = 64
_TWO_BYTE_OFFSETS = 8_192


@dataclass(frozen=True)
class EncodedBatch:
    """One encoded v2 record batch holding rows ``start`` to ``stop`` (exclusive) of the input;
    ``payload_bytes``: their key, value, header key and header value bytes (what a producer's
    buffer counts, without framing; a null counts 0)."""

    data: bytes
    start: int
    stop: int
    payload_bytes: int

    @property
    def record_count(self) -> int:
        return self.stop - self.start


# --- Arrow columns -------------------------------------------------------------------------------


def _combined(column: Any) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    if not isinstance(column, pa.Array):
        return pa.array(column)
    return column


def _bytes_column(column: Any, what: str, rows: int) -> ByteColumn:
    if column is None:
        return ByteColumn(
            np.full(rows, -1, np.int64), np.zeros(rows, np.int64), np.empty(0, np.uint8)
        )
    arr = _combined(column)
    kind = arr.type
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        offset_type: type[np.signedinteger[Any]] = np.int32
    elif pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        offset_type = np.int64
    elif pa.types.is_null(kind):
        return _bytes_column(None, what, len(arr))
    else:
        raise SchemaMismatchError(f"Kafka record {what} must be binary or string, not {kind}")
    if len(arr) != rows:
        raise ValueError(f"Kafka record {what} column has {len(arr)} rows, expected {rows}")
    _, offsets_buf, data_buf = arr.buffers()
    item = np.dtype(offset_type).itemsize
    offsets = np.frombuffer(offsets_buf, offset_type, rows + 1, arr.offset * item).astype(np.int64)
    lengths = np.diff(offsets)
    data = (
        np.frombuffer(data_buf, np.uint8)
        if data_buf is not None and data_buf.size
        else np.empty(0, np.uint8)
    )
    if arr.null_count:
        lengths[~valid_rows(arr)] = -1
    return ByteColumn(lengths, offsets[:-1], data)


def _timestamps(column: Any, rows: int, now_ms: int | None) -> np.ndarray:
    """Timestamps in ms (nulls: now)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if column is None:
        return np.full(rows, now, np.int64)
    if isinstance(column, np.ndarray):
        if len(column) != rows:
            raise ValueError(f"timestamp column has {len(column)} rows, expected {rows}")
        return column.astype(np.int64)
    arr = _combined(column)
    if len(arr) != rows:
        raise ValueError(f"timestamp column has {len(arr)} rows, expected {rows}")
    if pa.types.is_timestamp(arr.type):
        per_ms = {"s": -1, "ms": 1, "us": 1_000, "ns": 1_000_000}[arr.type.unit]
        ints = arr.cast(pa.int64())
        arr = pc.multiply(ints, 1000) if per_ms < 0 else pc.floor(pc.divide(ints, float(per_ms)))
        arr = arr.cast(pa.int64())
    elif not pa.types.is_integer(arr.type):
        raise SchemaMismatchError(f"Kafka record timestamps must be int64 ms, not {arr.type}")
    values: np.ndarray = arr.fill_null(now).to_numpy(zero_copy_only=False).astype(np.int64)
    return values


def _headers_column(column: Any, rows: int) -> HeaderEntries | None:
    if column is None:
        return None
    arr = _combined(column)
    if pa.types.is_null(arr.type):
        return None
    if len(arr) != rows:
        raise ValueError(f"headers column has {len(arr)} rows, expected {rows}")
    kind = arr.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(
        kind.value_type
    ):
        raise SchemaMismatchError(
            f"Kafka record headers must be array<struct<key string, value binary>>, not {kind}"
        )
    entries = arr.flatten()
    struct_type = kind.value_type
    if struct_type.get_field_index("key") < 0 or struct_type.get_field_index("value") < 0:
        raise SchemaMismatchError(f"Kafka record headers need fields key and value: {kind}")
    fields = dict(zip([f.name for f in struct_type], entries.flatten(), strict=True))
    keys = _bytes_column(fields["key"], "header key", len(entries))
    if np.any(keys.lengths < 0):
        raise SchemaMismatchError("a Kafka record header has a null key")
    values = _bytes_column(fields["value"], "header value", len(entries))
    counts = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    counts = counts.astype(np.int64)
    entry_rows = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    entry_sizes = (
        varint_sizes(zigzag(keys.lengths))
        + keys.lengths
        + varint_sizes(zigzag(values.lengths))
        + values.sizes
    )
    row_sizes = np.bincount(entry_rows, weights=entry_sizes, minlength=rows).astype(np.int64)
    return HeaderEntries(counts, entry_rows, keys, values, entry_sizes, row_sizes)


# --- splitting ------------------------------------------------------------------------------------


def _split(fixed: np.ndarray, timestamps: np.ndarray, bound: int) -> np.ndarray:
    """First row of each batch: rows are added while the batch stays within ``bound`` bytes
    (greedy and exact: the next row would not have fit)."""
    if len(timestamps) and timestamps.min() == timestamps.max():
        starts = _split_same_time(fixed, bound)
        if starts is not None:
            return starts
    return _split_varying_time(fixed, timestamps, bound)


def _record_sizes(body: np.ndarray) -> np.ndarray:
    """Whole record sizes: the body and its length varint."""
    sizes: np.ndarray = body + varint_sizes(zigzag(body))
    return sizes


def _split_same_time(fixed: np.ndarray, bound: int) -> np.ndarray | None:
    """:func:`_split` when every timestamp delta is 0 (one byte): a record's size then depends
    on its position in the batch only through the offset delta, one byte for the first
    ``_ONE_BYTE_OFFSETS`` records and two up to ``_TWO_BYTE_OFFSETS``; so two running sums
    (every record at one and at two bytes) answer each batch with two binary searches.
    ``None`` when a batch could hold more records than two-byte offset deltas cover."""
    rows = len(fixed)
    room = bound - HEADER_SIZE
    cum1 = np.zeros(rows + 1, np.int64)  # record sizes with one-byte offset deltas
    np.cumsum(_record_sizes(fixed + 2), out=cum1[1:])
    cum2 = np.zeros(rows + 1, np.int64)  # ... with two-byte ones
    np.cumsum(_record_sizes(fixed + 3), out=cum2[1:])
    starts: list[int] = []
    start = 0
    while start < rows:
        starts.append(start)
        fit = int(cum1.searchsorted(cum1[start] + room, "right")) - 1 - start
        if fit > _ONE_BYTE_OFFSETS:
            rest = start + _ONE_BYTE_OFFSETS
            left = room - int(cum1[rest] - cum1[start])
            more = int(cum2.searchsorted(cum2[rest] + left, "right")) - 1 - rest
            if more >= _TWO_BYTE_OFFSETS - _ONE_BYTE_OFFSETS:
                return None
            fit = _ONE_BYTE_OFFSETS + more
        start += max(fit, 1)
    return np.array(starts, np.int64)


def _split_varying_time(fixed: np.ndarray, timestamps: np.ndarray, bound: int) -> np.ndarray:
    """:func:`_split` for any timestamps, one batch at a time (timestamp deltas are relative to
    the batch's first record)."""
    rows = len(fixed)
    room = bound - HEADER_SIZE
    cum_lower = np.zeros(rows + 1, np.int64)  # sizes with 1-byte deltas and length: a lower bound
    np.cumsum(fixed + 3, out=cum_lower[1:])
    starts: list[int] = []
    offset_sizes = np.empty(0, np.int64)
    start = 0
    while start < rows:
        fit = int(np.searchsorted(cum_lower, cum_lower[start] + room, "right")) - 1 - start
        window = max(fit, 1)
        if len(offset_sizes) < window:
            offset_sizes = varint_sizes(zigzag(np.arange(max(window, 2 * len(offset_sizes)))))
        body = fixed[start : start + window] + offset_sizes[: min(window, rows - start)]
        deltas = timestamps[start : start + window] - timestamps[start]
        body = body + varint_sizes(zigzag(deltas))
        total = np.cumsum(_record_sizes(body))
        starts.append(start)
        start += max(int(np.searchsorted(total, room, "right")), 1)
    return np.array(starts, np.int64)


# --- encoding -------------------------------------------------------------------------------------


def oversized_row(error: MessageSizeTooLargeError) -> int | None:
    """The row :func:`encode_record_batches` refused as too large (``None``: another error)."""
    match = re.match(r"row (\d+) encodes to", str(error.args[0]) if error.args else "")
    return None if match is None else int(match.group(1))


def encode_record_batches(
    keys: Any,
    values: Any,
    *,
    headers: Any = None,
    timestamps: Any = None,
    compression: str | int = "none",
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
    producer: ProducerState | None = None,
    now_ms: int | None = None,
    group_starts: Any = None,
) -> list[EncodedBatch]:
    """Encode the rows of Arrow columns as v2 record batches (the layout in
    :mod:`unaligned.kafka.records.record_batch_layout`).

    ``keys``/``values``: binary or string columns (``None``: all null); ``headers``: optional
    ``list<struct<key string, value binary>>``; ``timestamps``: optional int64 ms (or an Arrow
    timestamp column, or a numpy array; nulls and ``None`` take ``now_ms``, default the clock).
    ``compression``: ``compression.type`` or its codec id. ``producer``: producer id, epoch,
    first sequence and transactional bit (batch k's base sequence is the first sequence plus
    the rows before it). ``group_starts``: increasing first rows of groups (e.g. one per
    partition) that no batch may span; the first must be 0. Returns the batches in row order
    with the rows each one holds.
    """
    codec = usable_codec_id(compression)
    if values is None and keys is None:
        return []
    rows = len(_combined(values if values is not None else keys))
    value_col = _bytes_column(values, "value", rows)
    key_col = _bytes_column(keys, "key", rows)
    if rows == 0:
        return []
    header_col = _headers_column(headers, rows)
    ts = _timestamps(timestamps, rows, now_ms)
    state = producer or ProducerState()

    zz_key = zigzag(key_col.lengths)
    zz_value = zigzag(value_col.lengths)
    counts = header_col.counts if header_col is not None else np.zeros(rows, np.int64)
    zz_count = zigzag(counts)
    size_key, size_value, size_count = (
        varint_sizes(zz_key),
        varint_sizes(zz_value),
        varint_sizes(zz_count),
    )
    # everything but the length, timestamp delta and offset delta varints
    fixed = 1 + size_key + key_col.sizes + size_value + value_col.sizes + size_count
    if header_col is not None:
        fixed += header_col.row_sizes
    single = HEADER_SIZE + fixed + 2 + varint_sizes(zigzag(fixed + 2))
    if int(single.max()) > max_request_size:
        row = int(np.argmax(single))
        raise MessageSizeTooLargeError(
            f"row {row} encodes to a {int(single[row])}-byte record batch, larger than "
            f"max.request.size {max_request_size}"
        )
    bound = min(batch_size, max_request_size)
    if group_starts is None:
        starts = _split(fixed, ts, bound)
    else:
        edges = [int(g) for g in group_starts] + [rows]
        if edges[0] != 0:
            raise ValueError(f"group_starts must start at row 0, not {edges[0]}")
        starts = np.concatenate(
            [
                lo + _split(fixed[lo:hi], ts[lo:hi], bound)
                for lo, hi in zip(edges, edges[1:], strict=False)
                if hi > lo
            ]
        )
    payload = np.zeros(rows + 1, np.int64)  # running sum of the rows' payload bytes
    np.cumsum(key_col.sizes + value_col.sizes, out=payload[1:])
    if header_col is not None and len(header_col.rows):
        entry_bytes = header_col.keys.sizes + header_col.values.sizes
        payload[1:] += np.cumsum(np.bincount(header_col.rows, entry_bytes, rows).astype(np.int64))
    # Encode groups of whole batches of about _GROUP_ROWS rows: the scatters into the output
    # then stay in the CPU cache (one pass over a million rows is several times slower).
    at = np.searchsorted(starts, np.arange(_GROUP_ROWS, rows, _GROUP_ROWS))
    cuts = sorted({0, *starts[at[at < len(starts)]].tolist()}) + [rows]
    batches: list[EncodedBatch] = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        group_starts = starts[(starts >= lo) & (starts < hi)] - lo
        data = encode_records(
            RecordColumns(
                key_col.slice(lo, hi),
                value_col.slice(lo, hi),
                None if header_col is None else header_col.slice(lo, hi),
                ts[lo:hi],
                fixed[lo:hi],
                (zz_key[lo:hi], size_key[lo:hi]),
                (zz_value[lo:hi], size_value[lo:hi]),
                (zz_count[lo:hi], size_count[lo:hi]),
            ),
            group_starts,
            codec,
            state,
            lo,
        )
        bounds = [lo + start for start in group_starts.tolist()] + [hi]
        batches += [
            EncodedBatch(batch, start, stop, int(payload[stop] - payload[start]))
            for batch, start, stop in zip(data, bounds[:-1], bounds[1:], strict=True)
        ]
    return batches
