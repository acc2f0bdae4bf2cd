"""Encoding Kafka v2 record batches (magic 2) straight from Arrow columns, fast.

The mirror image of :mod:`unaligned.kafka.record_decoder`: kafka-python builds a batch record by
record in Python (``DefaultRecordBatchBuilder.append``); :func:`encode_record_batches` computes
every record's field sizes and positions column-wise with numpy and scatters the key, value and
header bytes out of the Arrow buffers, so keys and values never become Python objects. Python
loops run only over batches (split, header, codec, CRC), never over records or headers.

Wire layout of one batch (all integers big-endian; ``varint``/``varlong`` are zig-zag encoded
base-128 varints, least significant group first, as Kafka's ``ByteUtils.writeVarint``)::

    offset  size  field
    0       8     baseOffset            int64   0 (the broker assigns offsets)
    8       4     batchLength           int32   bytes after this field (total size - 12)
    12      4     partitionLeaderEpoch  int32   -1 (the broker sets it)
    16      1     magic                 int8    2
    17      4     crc                   uint32  CRC-32C of bytes 21..end (after compression)
    21      2     attributes            int16   bits 0-2 codec (0 none, 1 gzip, 2 snappy,
                                                3 lz4, 4 zstd), bit 4 transactional;
                                                timestamp type (bit 3) and control (bit 5) 0
    23      4     lastOffsetDelta       int32   record count - 1
    27      8     baseTimestamp         int64   the first record's timestamp (ms)
    35      8     maxTimestamp          int64   the largest timestamp of the batch
    43      8     producerId            int64   -1 without idempotence
    51      2     producerEpoch         int16   -1 without idempotence
    53      4     baseSequence          int32   the first record's sequence, -1 without
    57      4     recordCount           int32
    61      ...   records               the records, each as below, concatenated; with a codec
                                        the whole section is compressed as one (snappy in the
                                        xerial framing and lz4 as an LZ4 frame, as Kafka does)

    record:
      length          varint   bytes of the record after this field
      attributes      int8     0
      timestampDelta  varlong  timestamp - baseTimestamp
      offsetDelta     varint   position of the record in the batch (0, 1, ...)
      keyLength       varint   -1 for a null key
      key             bytes
      valueLength     varint   -1 for a null value
      value           bytes
      headerCount     varint
      headers         per header: keyLength varint, key (UTF-8), valueLength varint (-1 for
                      null), value bytes

Splitting (:func:`encode_record_batches`): rows go into batches in order; a batch takes rows while
its uncompressed size (header included) stays within ``batch_size`` (and ``max_request_size``), as
kafka-python's and Java's producers bound ``batch.size``; a single row larger than that gets a
batch of its own, and a row whose batch would exceed ``max_request_size`` raises
``kafka.errors.MessageSizeTooLargeError`` (what ``KafkaProducer.send`` raises for it).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kafka.errors import MessageSizeTooLargeError
from kafka.record.util import calc_crc32c

from kafka import codec as kafka_codec
from unaligned.errors import SchemaMismatchError

HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_CRC_START = 21
TRANSACTIONAL = 0x10
#: ``compression.type`` -> the codec id of the batch attributes.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_COMPRESS: dict[int, tuple[str, Callable[[], bool], Callable[[bytes], bytes]]] = {
    1: ("gzip", kafka_codec.has_gzip, kafka_codec.gzip_encode),
    2: ("snappy", kafka_codec.has_snappy, kafka_codec.snappy_encode),
    3: ("lz4", kafka_codec.has_lz4, kafka_codec.lz4_encode),
    4: ("zstd", kafka_codec.has_zstd, kafka_codec.zstd_encode),
}
DEFAULT_BATCH_SIZE = 16_384
DEFAULT_MAX_REQUEST_SIZE = 1_048_576
_INT32_MAX = 2**31 - 1
_GROUP_ROWS = 8_192


@dataclass(frozen=True)
class ProducerState:
    """The idempotence/transaction fields of the batch header (defaults: a plain producer)."""

    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1  # the sequence of the first row; batch k starts at it + its row
    transactional: bool = False


@dataclass(frozen=True)
class EncodedBatch:
    """One encoded v2 record batch holding rows ``start`` to ``stop`` (exclusive) of the input."""

    data: bytes
    start: int
    stop: int

    @property
    def record_count(self) -> int:
        return self.stop - self.start


def codec_id(compression: str | int) -> int:
    """``compression.type`` (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``) -> codec id."""
    if isinstance(compression, int):
        if compression not in (0, *_COMPRESS):
            raise ValueError(f"unknown Kafka compression codec id {compression}")
        return compression
    try:
        return CODECS[compression.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compression.type {compression!r}; expected one of {sorted(CODECS)}"
        ) from None


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap to 0 past int32 max."""
    return (sequence + increment) % (_INT32_MAX + 1)


# --- varints --------------------------------------------------------------------------------------


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    zz: np.ndarray = ((v << 1) ^ (v >> 63)).view(np.uint64)
    return zz


def _varint_sizes(zz: np.ndarray) -> np.ndarray:
    """Bytes of each (already zig-zagged) varint."""
    sizes = np.ones(len(zz), np.int64)
    if not len(zz):
        return sizes
    top = int(zz.max())
    shift = 7
    while shift < 64 and top >> shift:
        sizes += zz >= np.uint64(1 << shift)
        shift += 7
    return sizes


def _put_varints(out: np.ndarray, pos: np.ndarray, zz: np.ndarray, sizes: np.ndarray) -> None:
    """Write each zig-zagged varint ``zz[i]`` (``sizes[i]`` bytes) at ``out[pos[i]]``."""
    low7 = np.uint64(0x7F)
    while True:
        more = sizes > 1
        out[pos] = (zz & low7).astype(np.uint8) | (more.astype(np.uint8) << np.uint8(7))
        left = np.flatnonzero(more)
        if not left.size:
            return
        pos, zz, sizes = pos[left] + 1, zz[left] >> np.uint64(7), sizes[left] - 1


# --- Arrow columns -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bytes:
    """A binary/string column: lengths (-1 for null), where each value starts in ``data``."""

    lengths: np.ndarray  # int64
    starts: np.ndarray  # int64
    data: np.ndarray  # uint8

    @property
    def sizes(self) -> np.ndarray:
        sizes: np.ndarray = np.maximum(self.lengths, 0)
        return sizes

    def slice(self, lo: int, hi: int) -> _Bytes:
        return _Bytes(self.lengths[lo:hi], self.starts[lo:hi], self.data)


def _combined(column: Any) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    if not isinstance(column, pa.Array):
        return pa.array(column)
    return column


def _bytes_column(column: Any, what: str, rows: int) -> _Bytes:
    if column is None:
        return _Bytes(np.full(rows, -1, np.int64), np.zeros(rows, np.int64), np.empty(0, np.uint8))
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
        lengths[~arr.is_valid().to_numpy(zero_copy_only=False)] = -1
    return _Bytes(lengths, offsets[:-1], data)


def _timestamps(column: Any, rows: int, now_ms: int | None) -> tuple[np.ndarray, bool]:
    """Timestamps in ms (nulls: now) and whether they can differ between rows."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if column is None:
        return np.full(rows, now, np.int64), False
    if isinstance(column, np.ndarray):
        if len(column) != rows:
            raise ValueError(f"timestamp column has {len(column)} rows, expected {rows}")
        return column.astype(np.int64), True
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
    return values, True


@dataclass(frozen=True)
class _Headers:
    """Header entries of all rows, flattened in row order."""

    counts: np.ndarray  # per row
    rows: np.ndarray  # the row of each entry
    keys: _Bytes
    values: _Bytes
    entry_sizes: np.ndarray  # encoded bytes of each entry
    row_sizes: np.ndarray  # encoded bytes of each row's entries (count varint excluded)

    def slice(self, lo: int, hi: int) -> _Headers:
        first = int(self.counts[:lo].sum())
        last = first + int(self.counts[lo:hi].sum())
        return _Headers(
            self.counts[lo:hi],
            self.rows[first:last] - lo,
            self.keys.slice(first, last),
            self.values.slice(first, last),
            self.entry_sizes[first:last],
            self.row_sizes[lo:hi],
        )


def _headers_column(column: Any, rows: int) -> _Headers | None:
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
        _varint_sizes(_zigzag(keys.lengths))
        + keys.lengths
        + _varint_sizes(_zigzag(values.lengths))
        + values.sizes
    )
    row_sizes = np.bincount(entry_rows, weights=entry_sizes, minlength=rows).astype(np.int64)
    return _Headers(counts, entry_rows, keys, values, entry_sizes, row_sizes)


# --- copying bytes --------------------------------------------------------------------------------


def _run_mask(size: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A bool mask of ``size`` bytes, true in each ``[start, start + length)`` (in order)."""
    ends = starts + lengths
    runs = np.empty(2 * len(starts) + 1, np.int64)
    runs[0] = starts[0]
    runs[2:-1:2] = starts[1:] - ends[:-1]
    runs[-1] = size - ends[-1]
    runs[1::2] = lengths
    keep = np.zeros(len(runs), bool)
    keep[1::2] = True
    mask: np.ndarray = np.repeat(keep, runs)
    return mask


def _copy(
    out: np.ndarray, dst: np.ndarray, src: np.ndarray, lengths: np.ndarray, data: np.ndarray
) -> None:
    """``out[dst[i]:dst[i]+lengths[i]] = data[src[i]:src[i]+lengths[i]]`` for every i; both
    sides are disjoint ranges in increasing order."""
    keep = lengths > 0
    if not keep.all():
        dst, src, lengths = dst[keep], src[keep], lengths[keep]
    if not len(lengths):
        return
    total = int(lengths.sum())
    src_lo, src_hi = int(src[0]), int(src[-1] + lengths[-1])
    if src_hi - src_lo == total:
        piece = data[src_lo:src_hi]
    else:  # gaps between values (null slots spanning bytes)
        piece = data[src_lo:src_hi][_run_mask(src_hi - src_lo, src - src_lo, lengths)]
    dst_lo, dst_hi = int(dst[0]), int(dst[-1] + lengths[-1])
    if total * 8 < dst_hi - dst_lo:  # sparse (short keys): an index per byte
        before = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=before[1:])
        out[np.repeat(dst - before, lengths) + np.arange(total, dtype=np.int64)] = piece
    else:
        window = out[dst_lo:dst_hi]
        window[_run_mask(dst_hi - dst_lo, dst - dst_lo, lengths)] = piece


# --- splitting ------------------------------------------------------------------------------------


def _split(fixed: np.ndarray, timestamps: np.ndarray, varying: bool, bound: int) -> np.ndarray:
    """First row of each batch: rows are added while the batch stays within ``bound`` bytes."""
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
            offset_sizes = _varint_sizes(_zigzag(np.arange(max(window, 2 * len(offset_sizes)))))
        body = fixed[start : start + window] + offset_sizes[: min(window, rows - start)]
        if varying:
            deltas = timestamps[start : start + window] - timestamps[start]
            body = body + _varint_sizes(_zigzag(deltas))
        else:
            body = body + 1
        total = np.cumsum(body + _varint_sizes(_zigzag(body)))
        starts.append(start)
        start += max(int(np.searchsorted(total, room, "right")), 1)
    return np.array(starts, np.int64)


# --- encoding -------------------------------------------------------------------------------------


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
) -> list[EncodedBatch]:
    """Encode the rows of Arrow columns as v2 record batches (the layout in the module doc).

    ``keys``/``values``: binary or string columns (``None``: all null); ``headers``: optional
    ``list<struct<key string, value binary>>``; ``timestamps``: optional int64 ms (or an Arrow
    timestamp column, or a numpy array; nulls and ``None`` take ``now_ms``, default the clock).
    ``compression``: ``compression.type`` or its codec id. ``producer``: producer id, epoch,
    first sequence and transactional bit (batch k's base sequence is the first sequence plus
    the rows before it). Returns the batches in row order with the rows each one holds.
    """
    codec = codec_id(compression)
    if codec:
        name, available, _ = _COMPRESS[codec]
        if not available():
            raise ValueError(f"compression.type {name}: the Python {name} library is missing")
    if values is None and keys is None:
        return []
    rows = len(_combined(values if values is not None else keys))
    value_col = _bytes_column(values, "value", rows)
    key_col = _bytes_column(keys, "key", rows)
    if rows == 0:
        return []
    header_col = _headers_column(headers, rows)
    ts, varying = _timestamps(timestamps, rows, now_ms)
    state = producer or ProducerState()

    zz_key = _zigzag(key_col.lengths)
    zz_value = _zigzag(value_col.lengths)
    counts = header_col.counts if header_col is not None else np.zeros(rows, np.int64)
    zz_count = _zigzag(counts)
    size_key, size_value, size_count = (
        _varint_sizes(zz_key),
        _varint_sizes(zz_value),
        _varint_sizes(zz_count),
    )
    # everything but the length, timestamp delta and offset delta varints
    fixed = 1 + size_key + key_col.sizes + size_value + value_col.sizes + size_count
    if header_col is not None:
        fixed += header_col.row_sizes
    single = HEADER_SIZE + fixed + 2 + _varint_sizes(_zigzag(fixed + 2))
    if int(single.max()) > max_request_size:
        row = int(np.argmax(single))
        raise MessageSizeTooLargeError(
            f"row {row} encodes to a {int(single[row])}-byte record batch, larger than "
            f"max.request.size {max_request_size}"
        )
    starts = _split(fixed, ts, varying, min(batch_size, max_request_size))
    # Encode groups of whole batches of about _GROUP_ROWS rows: the scatters into the output
    # then stay in the CPU cache (one pass over a million rows is several times slower).
    at = np.searchsorted(starts, np.arange(_GROUP_ROWS, rows, _GROUP_ROWS))
    cuts = sorted({0, *starts[at[at < len(starts)]].tolist()}) + [rows]
    batches: list[EncodedBatch] = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        group = _encode_group(
            _Columns(
                key_col.slice(lo, hi),
                value_col.slice(lo, hi),
                None if header_col is None else header_col.slice(lo, hi),
                ts[lo:hi],
                fixed[lo:hi],
                (zz_key[lo:hi], size_key[lo:hi]),
                (zz_value[lo:hi], size_value[lo:hi]),
                (zz_count[lo:hi], size_count[lo:hi]),
            ),
            starts[(starts >= lo) & (starts < hi)] - lo,
            codec,
            state,
            lo,
        )
        batches += group
    return batches


@dataclass(frozen=True)
class _Columns:
    keys: _Bytes
    values: _Bytes
    headers: _Headers | None
    ts: np.ndarray
    fixed: np.ndarray
    key_len: tuple[np.ndarray, np.ndarray]  # zig-zagged, sizes
    value_len: tuple[np.ndarray, np.ndarray]
    header_count: tuple[np.ndarray, np.ndarray]


def _encode_group(
    cols: _Columns, starts: np.ndarray, codec: int, state: ProducerState, first: int
) -> list[EncodedBatch]:
    """Encode rows already split into batches (``starts``); ``first``: the rows before them."""
    key_col, value_col, header_col, ts, fixed = (
        cols.keys,
        cols.values,
        cols.headers,
        cols.ts,
        cols.fixed,
    )
    (zz_key, size_key), (zz_value, size_value) = cols.key_len, cols.value_len
    zz_count, size_count = cols.header_count
    rows = len(ts)

    batch_count = len(starts)
    per_batch = np.diff(np.append(starts, rows))
    batch_of = np.repeat(np.arange(batch_count, dtype=np.int64), per_batch)
    first_row = starts[batch_of]
    zz_offset = _zigzag(np.arange(rows, dtype=np.int64) - first_row)
    zz_time = _zigzag(ts - ts[first_row])
    size_offset, size_time = _varint_sizes(zz_offset), _varint_sizes(zz_time)
    body = fixed + size_offset + size_time
    zz_body = _zigzag(body)
    size_body = _varint_sizes(zz_body)
    record = size_body + body
    record_start = np.zeros(rows, np.int64)
    np.cumsum(record[:-1], out=record_start[1:])
    record_start += HEADER_SIZE * (batch_of + 1)
    end = int(record_start[-1] + record[-1])
    out = np.zeros(end, np.uint8)  # attributes bytes stay 0

    pos = record_start
    _put_varints(out, pos, zz_body, size_body)
    pos = pos + size_body + 1
    _put_varints(out, pos, zz_time, size_time)
    pos += size_time
    _put_varints(out, pos, zz_offset, size_offset)
    pos += size_offset
    _put_varints(out, pos, zz_key, size_key)
    pos += size_key
    _copy(out, pos, key_col.starts, key_col.sizes, key_col.data)
    pos += key_col.sizes
    _put_varints(out, pos, zz_value, size_value)
    pos += size_value
    _copy(out, pos, value_col.starts, value_col.sizes, value_col.data)
    pos += value_col.sizes
    _put_varints(out, pos, zz_count, size_count)
    pos += size_count
    if header_col is not None and len(header_col.rows):
        _put_headers(out, pos, header_col)

    batch_start = record_start[starts] - HEADER_SIZE
    batch_end = np.append(batch_start[1:], end)
    max_time = np.maximum.reduceat(ts, starts)
    batches = _finish(
        out, starts, per_batch, batch_start, batch_end, ts, max_time, codec, state, first
    )
    return batches


def _put_headers(out: np.ndarray, row_pos: np.ndarray, headers: _Headers) -> None:
    """Write every header entry after its row's header count."""
    sizes = headers.entry_sizes
    before = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=before[1:])
    first_entry = np.zeros(len(headers.counts), np.int64)
    np.cumsum(headers.counts[:-1], out=first_entry[1:])
    rows = headers.rows
    pos = row_pos[rows] + before - before[first_entry[rows]]
    for column in (headers.keys, headers.values):
        zz = _zigzag(column.lengths)
        size = _varint_sizes(zz)
        _put_varints(out, pos, zz, size)
        pos = pos + size
        _copy(out, pos, column.starts, column.sizes, column.data)
        pos += column.sizes


def _finish(
    out: np.ndarray,
    starts: np.ndarray,
    per_batch: np.ndarray,
    batch_start: np.ndarray,
    batch_end: np.ndarray,
    ts: np.ndarray,
    max_time: np.ndarray,
    codec: int,
    state: ProducerState,
    first_row: int,
) -> list[EncodedBatch]:
    """Batch headers, codec and CRC, one batch at a time (``first_row``: rows before these)."""
    view = out.data
    attributes = codec | (TRANSACTIONAL if state.transactional else 0)
    compress = _COMPRESS[codec][2] if codec else None
    batches: list[EncodedBatch] = []
    for b, (first, count, lo, hi) in enumerate(
        zip(
            starts.tolist(),
            per_batch.tolist(),
            batch_start.tolist(),
            batch_end.tolist(),
            strict=True,
        )
    ):
        if compress is not None:
            buf: Any = bytearray(HEADER_SIZE) + compress(view[lo + HEADER_SIZE : hi].tobytes())
            at, size = 0, len(buf)
        else:
            buf, at, size = view, lo, hi - lo
        sequence = state.base_sequence
        if sequence >= 0:
            sequence = increment_sequence(sequence, first_row + first)
        _HEADER.pack_into(
            buf,
            at,
            0,
            size - 12,
            -1,
            2,
            0,
            attributes,
            count - 1,
            int(ts[first]),
            int(max_time[b]),
            state.producer_id,
            state.producer_epoch,
            sequence,
            count,
        )
        _CRC.pack_into(
            buf, at + _CRC_OFFSET, calc_crc32c(memoryview(buf)[at + _CRC_START : at + size])
        )
        data = bytes(buf) if compress is not None else view[lo:hi].tobytes()
        batches.append(EncodedBatch(data, first_row + first, first_row + first + count))
    return batches


def with_producer_state(batch: bytes, state: ProducerState) -> bytes:
    """The batch with other producer id, epoch, base sequence and transactional bit (CRC redone):
    how a batch encoded ahead of time gets the sequence the transaction manager hands out."""
    buf = bytearray(batch)
    attributes = struct.unpack_from(">h", buf, 21)[0] & ~TRANSACTIONAL
    if state.transactional:
        attributes |= TRANSACTIONAL
    struct.pack_into(">h", buf, 21, attributes)
    struct.pack_into(">qhi", buf, 43, state.producer_id, state.producer_epoch, state.base_sequence)
    _CRC.pack_into(buf, _CRC_OFFSET, calc_crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)
