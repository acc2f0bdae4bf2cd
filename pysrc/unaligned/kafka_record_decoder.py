"""Decoding Kafka record batches fast, pinned to kafka-python internals.

Speed: kafka-python decodes every record in Python (about 40,000 records/s per core).
:func:`decode_record_batches` decodes a whole fetch response instead: one short Python loop
finds record boundaries and numpy decodes the fields of all records at once, so record keys
and values never become Python objects. :class:`ColumnarPartitionRecords` plugs the decoder into
kafka-python's fetcher (private API of the pinned kafka-python version; see
:func:`install_columnar_fetch` and ``tests/test_kafka_record_decoder.py``). When the hook cannot
be installed, :func:`unaligned.record_batches.columns_from_consumer_records` converts
kafka-python's records instead.

Memory: one fetch response is decoded at a time (at most ``max.partition.fetch.bytes``); its
:class:`~unaligned.record_batches.RecordColumns` are cut into bounded Arrow batches by
:func:`unaligned.record_batches.to_record_batches`.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

import numpy as np
import pyarrow as pa

import kafka
from kafka import codec as kafka_codec
from kafka.protocol.consumer import IsolationLevel
from kafka.record.util import calc_crc32c

from unaligned.errors import RecordDecodeError
from unaligned.offsets import TopicPartition
from unaligned.record_batches import (
    RecordColumns,
    columns_from_consumer_records,
    kafka_arrow_schema,
)

logger = logging.getLogger(__name__)

#: The kafka-python version whose fetcher internals :class:`ColumnarPartitionRecords` fits.
PINNED_KAFKA_PYTHON = "3.0.12"

_HEADERS_TYPE: pa.DataType = kafka_arrow_schema(True).field("headers").type


# --- decoding one fetch response -------------------------------------------------------------


@dataclass(frozen=True)
class DecodedFetch:
    """One fetch response decoded: its records (or ``None``) and where the next fetch starts."""

    columns: RecordColumns | None
    next_fetch_offset: int
    leader_epoch: int
    bytes_read: int


class LegacyRecordFormat(Exception):
    """A batch in message format v0/v1; decoded by kafka-python instead."""


# Record batch header (message format v2), 61 bytes.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12
_CRC_START = 21
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DECOMPRESS = {
    1: ("gzip", kafka_codec.has_gzip, kafka_codec.gzip_decode),
    2: ("snappy", kafka_codec.has_snappy, kafka_codec.snappy_decode),
    3: ("lz4", kafka_codec.has_lz4, kafka_codec.lz4_decode),
    4: ("zstd", kafka_codec.has_zstd, kafka_codec.zstd_decode),
}


def _decompress(codec: int, payload: memoryview, tp: TopicPartition, base: int) -> bytes:
    if codec not in _DECOMPRESS:
        raise RecordDecodeError(
            f"{tp}: batch at offset {base} uses unknown compression codec {codec}"
        )
    name, available, decode = _DECOMPRESS[codec]
    if not available():
        raise RecordDecodeError(
            f"{tp}: batch at offset {base} is {name}-compressed and the Python {name} library is "
            "not installed on this worker"
        )
    return bytes(decode(payload.tobytes() if codec != 1 else payload))


def _walk(buf: bytes, pos: int, end: int, count: int, base: int, heads: list[int]) -> None:
    """Append where each record of one batch begins (at its length varint), as ``base`` +
    position in ``buf``. The loop body is kept minimal: it
    is the only per-record Python code on the read path. Lengths are never negative, so a
    zig-zag length is the varint value shifted right by one."""
    append = heads.append
    for _ in range(count):
        append(pos + base)
        b = buf[pos]
        if b < 0x80:
            pos += 1 + (b >> 1)
            continue
        b2 = buf[pos + 1]
        if b2 < 0x80:
            pos += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
            continue
        value = (b & 0x7F) | ((b2 & 0x7F) << 7)
        shift = 14
        pos += 2
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if value & 1:
            raise IndexError("negative record length")
        pos += value >> 1
    if pos != end:
        raise IndexError("record lengths do not add up to the batch length")


def _varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints at ``pos`` (one per record) -> (values, positions after them)."""
    first = arr[pos].astype(np.uint64)
    value = first & np.uint64(0x7F)
    after = pos + 1
    more = np.flatnonzero(first & np.uint64(0x80))
    shift = 7
    while more.size:
        if shift > 63:
            raise IndexError("varint longer than 10 bytes")
        b = arr[after[more]].astype(np.uint64)
        value[more] |= (b & np.uint64(0x7F)) << np.uint64(shift)
        after[more] += 1
        more = more[(b & np.uint64(0x80)) != 0]
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, after


def _gather(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes ``arr[s:s+l]`` of every (start, length > 0), concatenated; the ranges are
    disjoint and in increasing order."""
    if not len(starts):
        return np.empty(0, np.uint8)
    total = int(lengths.sum())
    lo = int(starts[0])
    ends = starts + lengths
    hi = int(ends[-1])
    if total * 8 < hi - lo:  # sparse (e.g. short keys in a large fetch): index per byte
        offsets = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        index = np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)
        return arr[index]
    # dense: a byte mask of alternating (gap, value) runs
    runs = np.empty(2 * len(starts), np.int64)
    runs[0] = 0
    runs[2::2] = starts[1:] - ends[:-1]
    runs[1::2] = lengths
    keep = np.zeros(2 * len(starts), bool)
    keep[1::2] = True
    return arr[lo:hi][np.repeat(keep, runs)]


def _binary_array(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0)
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise RecordDecodeError("a fetch holds more than 2 GiB of keys or values")
    present = sizes > 0
    data = _gather(arr, starts[present], sizes[present])
    null_count = int(len(valid) - np.count_nonzero(valid))
    validity = None if null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(),
        len(sizes),
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count=null_count,
    )


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos


def _parse_headers(buf: bytes, pos: int, count: int) -> list[tuple[str, bytes | None]]:
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key_len, pos = _read_varint(buf, pos)
        key = buf[pos : pos + key_len].decode("utf-8")
        pos += key_len
        value_len, pos = _read_varint(buf, pos)
        value = None if value_len < 0 else buf[pos : pos + value_len]
        pos += max(value_len, 0)
        headers.append((key, value))
    return headers


def _is_abort_marker(buf: bytes, records_start: int, batch_end: int) -> bool:
    """Control record key: version int16, type int16 (0 abort, 1 commit)."""
    pos = _read_varint(buf, records_start)[1] + 1  # length, attributes
    pos = _read_varint(buf, pos)[1]  # timestamp delta
    pos = _read_varint(buf, pos)[1]  # offset delta
    key_len, pos = _read_varint(buf, pos)
    if key_len < 4 or pos + 4 > batch_end:
        return False
    return struct.unpack_from(">h", buf, pos + 2)[0] == 0


class _BatchHeader(NamedTuple):
    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


class _AbortedTransactions:
    """read_committed filtering as the Java consumer does it: a transactional batch is skipped
    while its producer has an aborted transaction (from the fetch response) that started at or
    before the batch and whose abort marker has not been passed yet."""

    def __init__(self, aborted_transactions: Iterable[Any]) -> None:
        self._pending = deque(sorted(aborted_transactions, key=lambda txn: txn.first_offset))
        self._producers: set[int] = set()

    def skips(self, header: _BatchHeader, data: bytes, records_start: int, end: int) -> bool:
        if header.producer_id < 0:
            return False
        while self._pending and self._pending[0].first_offset <= header.next_offset - 1:
            self._producers.add(self._pending.popleft().producer_id)
        if header.attributes & _CONTROL:
            if _is_abort_marker(data, records_start, end):
                self._producers.discard(header.producer_id)
            return False
        return bool(header.attributes & _TRANSACTIONAL) and header.producer_id in self._producers


@dataclass
class _Scan:
    """Per batch with records to decode: where its records begin and its header values."""

    heads: list[int] = field(default_factory=list)  # record starts (at the length varint)
    counts: list[int] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)  # first timestamp, or the log-append time
    log_append: list[bool] = field(default_factory=list)
    # (buffer, first byte, end) of each batch's records; decompressed batches have their own
    # buffer, and then all sections are copied into one so that positions stay in order.
    sections: list[tuple[bytes, int, int]] = field(default_factory=list)
    compressed: bool = False

    def add(self, header: _BatchHeader, buf: bytes, start: int, end: int) -> None:
        _walk(buf, start, end, header.records, 0, self.heads)
        self.sections.append((buf, start, end))
        self.counts.append(header.records)
        self.bases.append(header.base_offset)
        appended = bool(header.attributes & _LOG_APPEND_TIME)
        self.times.append(header.max_timestamp if appended else header.first_timestamp)
        self.log_append.append(appended)

    def buffer_and_heads(self, data: bytes) -> tuple[bytes, np.ndarray]:
        heads = np.array(self.heads, np.int64)
        if not self.compressed:
            return data, heads
        combined = b"".join(memoryview(buf)[lo:hi] for buf, lo, hi in self.sections)
        lengths = np.array([hi - lo for _, lo, hi in self.sections], np.int64)
        placed = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        shift = placed - np.array([lo for _, lo, _ in self.sections], np.int64)
        return combined, heads + np.repeat(shift, np.array(self.counts, np.int64))


def decode_record_batches(
    buffer: bytes | memoryview,
    tp: TopicPartition,
    fetch_offset: int,
    *,
    read_committed: bool = False,
    aborted_transactions: Iterable[Any] = (),
    check_crcs: bool = False,
    include_headers: bool = False,
) -> DecodedFetch:
    """Decode the complete v2 record batches in one partition's fetch response.

    Records before ``fetch_offset`` are dropped (a compressed batch arrives whole). Control
    batches are skipped; with ``read_committed``, so are the batches of aborted transactions
    (``aborted_transactions``: the fetch response's ``(producer_id, first_offset)`` list).
    ``next_fetch_offset`` is the offset after the last complete batch, so it moves past
    transaction markers and aborted records too. A trailing partial batch is left for the next
    fetch. Raises :class:`LegacyRecordFormat` for message format v0/v1 and
    :class:`RecordDecodeError` for corrupt batches or missing codecs.
    """
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    view = memoryview(data)
    aborted = _AbortedTransactions(aborted_transactions) if read_committed else None
    scan = _Scan()
    next_fetch = fetch_offset
    epoch = -1
    pos = 0
    try:
        while len(data) - pos >= _LOG_OVERHEAD:
            end = pos + _LOG_OVERHEAD + struct.unpack_from(">i", data, pos + 8)[0]
            if end > len(data):
                break  # partial batch: the next fetch starts with it
            if data[pos + 16] != 2:
                raise LegacyRecordFormat(f"message format v{data[pos + 16]}")
            if end - pos < _HEADER.size:
                raise IndexError("batch shorter than its header")
            header = _BatchHeader._make(_HEADER.unpack_from(data, pos))
            if check_crcs and calc_crc32c(view[pos + _CRC_START : end]) != header.crc:
                raise RecordDecodeError(
                    f"{tp}: record batch at offset {header.base_offset} failed its CRC check"
                )
            epoch = header.leader_epoch
            records_start, pos = pos + _HEADER.size, end
            next_fetch = max(next_fetch, header.next_offset)
            if aborted is not None and aborted.skips(header, data, records_start, end):
                continue
            if header.attributes & _CONTROL or header.next_offset <= fetch_offset:
                continue
            if header.records == 0:
                continue
            codec = header.attributes & _CODEC_MASK
            if codec:
                raw = _decompress(codec, view[records_start:end], tp, header.base_offset)
                scan.compressed = True
                scan.add(header, raw, 0, len(raw))
            else:
                scan.add(header, data, records_start, end)
    except IndexError as exc:
        raise RecordDecodeError(
            f"{tp}: corrupt record batch near byte {pos} of a fetch at offset {fetch_offset}: {exc}"
        ) from None
    if not scan.heads:
        return DecodedFetch(None, next_fetch, epoch, pos)
    combined, heads = scan.buffer_and_heads(data)
    columns = _decode_fields(combined, heads, scan, fetch_offset, include_headers, tp)
    return DecodedFetch(columns if len(columns) else None, next_fetch, epoch, pos)


def _decode_fields(
    buf: bytes,
    heads: np.ndarray,
    scan: _Scan,
    fetch_offset: int,
    include_headers: bool,
    tp: TopicPartition,
) -> RecordColumns:
    """Decode every record's fields at once; drop records before ``fetch_offset``."""
    arr = np.frombuffer(buf, np.uint8)
    try:
        length, s = _varints(arr, heads)
        e = s + length
        ts_delta, p = _varints(arr, s + 1)  # after the record's attributes byte
        offset_delta, p = _varints(arr, p)
        key_len, p = _varints(arr, p)
        key_start = p
        value_len, p = _varints(arr, p + np.maximum(key_len, 0))
        value_start = p
        header_count, p = _varints(arr, p + np.maximum(value_len, 0))
    except IndexError:
        raise RecordDecodeError(
            f"{tp}: corrupt record in a fetch at offset {fetch_offset}"
        ) from None
    if np.any(p > e) or np.any(header_count < 0) or np.any((header_count == 0) & (p != e)):
        raise RecordDecodeError(
            f"{tp}: record fields do not match record lengths in a fetch at offset {fetch_offset}"
        )
    counts = np.array(scan.counts, np.int64)
    offsets = np.repeat(np.array(scan.bases, np.int64), counts) + offset_delta
    appended = np.repeat(np.array(scan.log_append, bool), counts)
    timestamps = np.repeat(np.array(scan.times, np.int64), counts)
    timestamps += np.where(appended, 0, ts_delta)
    keep = offsets >= fetch_offset
    if not keep.all():
        offsets, timestamps, appended = offsets[keep], timestamps[keep], appended[keep]
        key_start, key_len, value_start, value_len = (
            key_start[keep],
            key_len[keep],
            value_start[keep],
            value_len[keep],
        )
        header_count, p = header_count[keep], p[keep]
    headers = None
    if include_headers:
        with_headers = np.flatnonzero(header_count)
        if with_headers.size:
            rows: list[Any] = [None] * len(offsets)
            for i in with_headers.tolist():
                rows[i] = _parse_headers(buf, int(p[i]), int(header_count[i]))
            headers = pa.array(rows, type=_HEADERS_TYPE)
        else:
            headers = pa.nulls(len(offsets), type=_HEADERS_TYPE)
    return RecordColumns(
        offsets=offsets,
        timestamps_ms=timestamps,
        timestamp_types=appended.astype(np.int32),
        keys=_binary_array(arr, key_start, key_len),
        values=_binary_array(arr, value_start, value_len),
        headers=headers,
    )

# --- the kafka-python fetcher hook ------------------------------------------------------------


class ColumnarPartitionRecords:
    """Stands in for kafka-python's ``Fetcher.PartitionRecords`` (pinned 3.0.12).

    The fetcher builds one of these per fetch response, reads ``next_fetch_offset``,
    ``leader_epoch``, ``topic_partition``, ``bytes_read``, truthiness, calls ``take(n)``
    (whose list it hands out from ``poll()``; afterwards the consumer's position becomes
    ``next_fetch_offset``) and ``drain()``. Here ``take`` returns at most one
    :class:`RecordColumns` for the whole response and drains, so ``poll()`` yields columns.
    """

    def __init__(
        self,
        fetch_offset: int,
        tp: Any,
        records: Any,
        key_deserializer: Any = None,
        value_deserializer: Any = None,
        check_crcs: bool = True,
        isolation_level: Any = IsolationLevel.READ_UNCOMMITTED,
        aborted_transactions: Any = None,
        metric_aggregator: Any = None,
        on_drain: Any = lambda _: None,
        *,
        include_headers: bool,
        fallback: Any,
    ) -> None:
        self.fetch_offset = fetch_offset
        self.topic_partition = tp
        self.metric_aggregator = metric_aggregator
        self.on_drain = on_drain
        self._open = True
        try:
            decoded = decode_record_batches(
                records._buffer,
                TopicPartition(tp.topic, tp.partition),
                fetch_offset,
                read_committed=isolation_level == IsolationLevel.READ_COMMITTED,
                aborted_transactions=aborted_transactions or (),
                check_crcs=check_crcs,
                include_headers=include_headers,
            )
        except LegacyRecordFormat:
            legacy = fallback(
                fetch_offset,
                tp,
                records,
                key_deserializer=key_deserializer,
                value_deserializer=value_deserializer,
                check_crcs=check_crcs,
                isolation_level=isolation_level,
                aborted_transactions=aborted_transactions,
            )
            consumer_records = legacy.take()
            columns = (
                columns_from_consumer_records(consumer_records, include_headers)
                if consumer_records
                else None
            )
            decoded = DecodedFetch(
                columns, legacy.next_fetch_offset, legacy.leader_epoch, legacy.bytes_read
            )
        self._columns = decoded.columns
        # The fetcher only hands out records whose next_fetch_offset equals its position, so
        # this stays at fetch_offset until take() (as kafka-python's lazy iterator does).
        self.next_fetch_offset = fetch_offset
        self._next_after_take = decoded.next_fetch_offset
        self.leader_epoch = decoded.leader_epoch
        self.bytes_read = decoded.bytes_read
        self.records_read = 0 if decoded.columns is None else len(decoded.columns)

    def __bool__(self) -> bool:
        return self._open

    def take(self, n: int | None = None) -> list[RecordColumns]:
        columns, self._columns = self._columns, None
        self.next_fetch_offset = self._next_after_take
        self.drain()
        return [] if columns is None else [columns]

    def drain(self) -> None:
        if self._open:
            self._open = False
            self._columns = None
            if self.metric_aggregator:
                self.metric_aggregator.record(
                    self.topic_partition, self.bytes_read, self.records_read
                )
            self.on_drain(self)


def install_columnar_fetch(consumer: Any, include_headers: bool) -> bool:
    """Make ``consumer.poll()`` return :class:`RecordColumns` per fetch. False when this
    kafka-python is not the pinned version (then ``poll()`` returns ``ConsumerRecord``s)."""
    fetcher = getattr(consumer, "_fetcher", None)
    original = getattr(type(fetcher), "PartitionRecords", None)
    if kafka.__version__ != PINNED_KAFKA_PYTHON or original is None:
        logger.warning(
            "kafka-python %s is not the pinned %s: reading through its per-record decoder (slow)",
            kafka.__version__,
            PINNED_KAFKA_PYTHON,
        )
        return False

    def factory(*args: Any, **kwargs: Any) -> ColumnarPartitionRecords:
        return ColumnarPartitionRecords(
            *args, include_headers=include_headers, fallback=original, **kwargs
        )

    fetcher.PartitionRecords = factory
    return True
