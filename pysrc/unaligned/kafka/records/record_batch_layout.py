"""The Kafka v2 record batch (magic 2) on the wire, written column-wise with numpy.

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

:func:`encode_records` writes the records of rows already split into batches: each field's
varint and position for all rows at once, the key, value and header bytes scattered out of the
Arrow buffers (:class:`ByteColumn`, :class:`HeaderEntries`); then the header, codec and CRC of
each batch. :func:`with_producer_state` rewrites the producer fields of an encoded batch.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from kafka.record.util import calc_crc32c

from kafka import codec as kafka_codec

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
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ProducerState:
    """The idempotence/transaction fields of the batch header (defaults: a plain producer)."""

    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1  # the sequence of the first row; batch k starts at it + its row
    transactional: bool = False


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


def usable_codec_id(compression: str | int) -> int:
    """:func:`codec_id`, checking that the codec's Python library is installed."""
    codec = codec_id(compression)
    if codec:
        name, available, _ = _COMPRESS[codec]
        if not available():
            raise ValueError(f"compression.type {name}: the Python {name} library is missing")
    return codec


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap to 0 past int32 max."""
    return (sequence + increment) % (_INT32_MAX + 1)


# --- varints --------------------------------------------------------------------------------------


def zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    zz: np.ndarray = ((v << 1) ^ (v >> 63)).view(np.uint64)
    return zz


def varint_sizes(zz: np.ndarray) -> np.ndarray:
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


# --- the columns of the records -------------------------------------------------------------------


@dataclass(frozen=True)
class ByteColumn:
    """A binary/string column: lengths (-1 for null), where each value starts in ``data``."""

    lengths: np.ndarray  # int64
    starts: np.ndarray  # int64
    data: np.ndarray  # uint8

    @property
    def sizes(self) -> np.ndarray:
        sizes: np.ndarray = np.maximum(self.lengths, 0)
        return sizes

    def slice(self, lo: int, hi: int) -> ByteColumn:
        return ByteColumn(self.lengths[lo:hi], self.starts[lo:hi], self.data)


@dataclass(frozen=True)
class HeaderEntries:
    """Header entries of all rows, flattened in row order."""

    counts: np.ndarray  # per row
    rows: np.ndarray  # the row of each entry
    keys: ByteColumn
    values: ByteColumn
    entry_sizes: np.ndarray  # encoded bytes of each entry
    row_sizes: np.ndarray  # encoded bytes of each row's entries (count varint excluded)

    def slice(self, lo: int, hi: int) -> HeaderEntries:
        first = int(self.counts[:lo].sum())
        last = first + int(self.counts[lo:hi].sum())
        return HeaderEntries(
            self.counts[lo:hi],
            self.rows[first:last] - lo,
            self.keys.slice(first, last),
            self.values.slice(first, last),
            self.entry_sizes[first:last],
            self.row_sizes[lo:hi],
        )


@dataclass(frozen=True)
class RecordColumns:
    keys: ByteColumn
    values: ByteColumn
    headers: HeaderEntries | None
    ts: np.ndarray
    fixed: np.ndarray  # record bytes but the length, timestamp delta and offset delta varints
    key_len: tuple[np.ndarray, np.ndarray]  # zig-zagged, sizes
    value_len: tuple[np.ndarray, np.ndarray]
    header_count: tuple[np.ndarray, np.ndarray]


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


# --- encoding -------------------------------------------------------------------------------------


def encode_records(
    cols: RecordColumns, starts: np.ndarray, codec: int, state: ProducerState, first: int
) -> list[bytes]:
    """The batches of rows already split into batches (``starts``: the first row of each), in
    order; ``first``: the rows before these (for the base sequences)."""
    key_col, value_col, header_col = cols.keys, cols.values, cols.headers
    ts, fixed = cols.ts, cols.fixed
    (zz_key, size_key), (zz_value, size_value) = cols.key_len, cols.value_len
    zz_count, size_count = cols.header_count
    rows = len(ts)

    batch_count = len(starts)
    per_batch = np.diff(np.append(starts, rows))
    batch_of = np.repeat(np.arange(batch_count, dtype=np.int64), per_batch)
    first_row = starts[batch_of]
    zz_offset = zigzag(np.arange(rows, dtype=np.int64) - first_row)
    zz_time = zigzag(ts - ts[first_row])
    size_offset, size_time = varint_sizes(zz_offset), varint_sizes(zz_time)
    body = fixed + size_offset + size_time
    zz_body = zigzag(body)
    size_body = varint_sizes(zz_body)
    record = size_body + body
    record_start = np.zeros(rows, np.int64)
    np.cumsum(record[:-1], out=record_start[1:])
    record_start += HEADER_SIZE * (batch_of + 1)
    end = int(record_start[-1] + record[-1])
    out = np.zeros(end, np.uint8)  # attributes bytes stay 0

    # Where each field starts; then every varint of every record in one pass, the bytes after.
    time_at = record_start + size_body + 1  # the attributes byte stays 0
    offset_at = time_at + size_time
    key_len_at = offset_at + size_offset
    key_at = key_len_at + size_key
    value_len_at = key_at + key_col.sizes
    value_at = value_len_at + size_value
    count_at = value_at + value_col.sizes
    _put_varints(
        out,
        np.concatenate((record_start, time_at, offset_at, key_len_at, value_len_at, count_at)),
        np.concatenate((zz_body, zz_time, zz_offset, zz_key, zz_value, zz_count)),
        np.concatenate((size_body, size_time, size_offset, size_key, size_value, size_count)),
    )
    _copy(out, key_at, key_col.starts, key_col.sizes, key_col.data)
    _copy(out, value_at, value_col.starts, value_col.sizes, value_col.data)
    if header_col is not None and len(header_col.rows):
        _put_headers(out, count_at + size_count, header_col)

    batch_start = record_start[starts] - HEADER_SIZE
    batch_end = np.append(batch_start[1:], end)
    max_time = np.maximum.reduceat(ts, starts)
    batches = _finish(
        out, starts, per_batch, batch_start, batch_end, ts, max_time, codec, state, first
    )
    return batches


def _put_headers(out: np.ndarray, row_pos: np.ndarray, headers: HeaderEntries) -> None:
    """Write every header entry after its row's header count."""
    sizes = headers.entry_sizes
    before = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=before[1:])
    first_entry = np.zeros(len(headers.counts), np.int64)
    np.cumsum(headers.counts[:-1], out=first_entry[1:])
    rows = headers.rows
    pos = row_pos[rows] + before - before[first_entry[rows]]
    for column in (headers.keys, headers.values):
        zz = zigzag(column.lengths)
        size = varint_sizes(zz)
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
) -> list[bytes]:
    """Batch headers, codec and CRC, one batch at a time (``first_row``: rows before these)."""
    view = out.data
    attributes = codec | (TRANSACTIONAL if state.transactional else 0)
    compress = _COMPRESS[codec][2] if codec else None
    batches: list[bytes] = []
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
        batches.append(bytes(buf) if compress is not None else view[lo:hi].tobytes())
    return batches


def has_producer_state(batch: bytes, state: ProducerState) -> bool:
    """Whether ``batch`` already carries ``state`` (producer id, epoch, base sequence and the
    transactional bit): then :func:`with_producer_state` would give it back unchanged."""
    transactional = bool(struct.unpack_from(">h", batch, 21)[0] & TRANSACTIONAL)
    fields = struct.unpack_from(">qhi", batch, 43)
    wanted = (state.producer_id, state.producer_epoch, state.base_sequence)
    return transactional == state.transactional and fields == wanted


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
