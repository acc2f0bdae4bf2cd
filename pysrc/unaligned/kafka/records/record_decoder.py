"""Decoding Kafka fetch answers (v2 record batches) into columns, fast, many partitions at once.

Speed: kafka-python decodes every record in Python (about 40,000 records/s per core).
:class:`FetchDecoder` walks each partition's answer batch by batch as it arrives (framing, CRC,
compression, log-append time, control batches and read_committed filtering of aborted
transactions, as the Java consumer does) and notes where each record begins
(:class:`~unaligned.kafka.records.record_scan.RecordScan`); :meth:`FetchDecoder.decode` then
decodes the fields of every record of every partition added with one set of numpy passes
(:mod:`unaligned.kafka.records.record_fields`), so record keys and values never become Python
objects and a read task over 1,000 partitions pays those passes once per round, not once per
partition. The read tasks (:mod:`unaligned.source.partition_reader`) feed it the answers of
:mod:`unaligned.kafka.fetch.range_fetch`, bounded by each range's end;
:func:`decode_record_batches` is the same for one answer. Message format v0/v1 goes through
:func:`decode_legacy_batches`.

Memory: the answers added stay referenced until :meth:`FetchDecoder.decode`; the reader decodes
at the end of each round and whenever :attr:`FetchDecoder.pending_bytes` reaches its bound.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from kafka.record import MemoryRecords
from kafka.record.util import calc_crc32c

from kafka import codec as kafka_codec
from unaligned.errors import LegacyRecordFormatError, RecordDecodeError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records.record_columns import RecordColumns, columns_from_consumer_records
from unaligned.kafka.records.record_fields import DecodedFields, decode_fields
from unaligned.kafka.records.record_scan import NO_END, RecordScan, read_varint


@dataclass(frozen=True)
class DecodedFetch:
    """One fetch response decoded: its records (or ``None``) and where the next fetch starts."""

    columns: RecordColumns | None
    next_fetch_offset: int
    leader_epoch: int
    bytes_read: int
    records_decoded: int
    """Records of the batches decoded, before those outside ``[fetch_offset, end_offset)`` were
    dropped (what the decode cost; the benchmarks report it per record returned)."""


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


def _decompress(codec: int, payload: memoryview, tp: TopicPartitionId, base: int) -> bytes:
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


def _is_abort_marker(buf: bytes, records_start: int, batch_end: int) -> bool:
    """Control record key: version int16, type int16 (0 abort, 1 commit)."""
    pos = read_varint(buf, records_start)[1] + 1  # length, attributes
    pos = read_varint(buf, pos)[1]  # timestamp delta
    pos = read_varint(buf, pos)[1]  # offset delta
    key_len, pos = read_varint(buf, pos)
    if key_len < 4 or pos + 4 > batch_end:
        return False
    kind: int = struct.unpack_from(">h", buf, pos + 2)[0]
    return kind == 0


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


@dataclass(frozen=True)
class ScannedFetch:
    """One partition's fetch answer walked (its records not decoded yet): where the next fetch
    starts, the leader epoch of its last batch (-1: none), the bytes walked and the records of
    the batches taken (:attr:`DecodedFetch.records_decoded`)."""

    next_fetch_offset: int
    leader_epoch: int
    bytes_read: int
    records_decoded: int


@dataclass(frozen=True)
class DecodedRecords:
    """Several partitions' records as one set of columns: partition after partition, in the
    order they were added, each in offset order; ``partitions`` gives each one's row count
    (partitions without a record left out)."""

    columns: RecordColumns
    partitions: tuple[tuple[TopicPartitionId, int], ...]


@dataclass(frozen=True)
class _Added:
    tp: TopicPartitionId
    fetch_offset: int
    first_batch: int
    batches: int


class FetchDecoder:
    """Fetch answers of any number of partitions, walked one by one as they arrive
    (:meth:`add`) and decoded together (:meth:`decode`): the numpy passes over the records'
    fields run once for all of them, not once per partition."""

    def __init__(
        self,
        *,
        read_committed: bool = False,
        check_crcs: bool = False,
        include_headers: bool = False,
    ) -> None:
        self._read_committed = read_committed
        self._check_crcs = check_crcs
        self._include_headers = include_headers
        self._scan = RecordScan()
        self._added: list[_Added] = []

    @property
    def pending_bytes(self) -> int:
        """Bytes of the records added and not decoded yet."""
        return self._scan.section_bytes

    def add(
        self,
        buffer: bytes | memoryview,
        tp: TopicPartitionId,
        fetch_offset: int,
        *,
        aborted_transactions: Iterable[Any] = (),
        end_offset: int | None = None,
    ) -> ScannedFetch:
        """Walk the complete v2 record batches of one partition's fetch answer and keep its
        records in ``[fetch_offset, end_offset)`` for :meth:`decode`.

        Records before ``fetch_offset`` are dropped (a compressed batch arrives whole); with
        ``end_offset`` (exclusive), so are records at or after it, and the walk stops at the
        first batch that starts there: nothing past a task's range is decoded. Control
        batches are skipped; with ``read_committed``, so are the batches of aborted
        transactions (``aborted_transactions``: the answer's ``(producer_id, first_offset)``
        list). ``next_fetch_offset`` is the offset after the last complete batch, so it moves
        past transaction markers and aborted records too. A trailing partial batch is left for
        the next fetch. Raises :class:`LegacyRecordFormatError` for message format v0/v1 and
        :class:`RecordDecodeError` for corrupt batches or missing codecs; then nothing of this
        answer is kept.
        """
        data = buffer if isinstance(buffer, bytes) else bytes(buffer)
        view = memoryview(data)
        aborted = _AbortedTransactions(aborted_transactions) if self._read_committed else None
        scan = self._scan
        before = len(scan)
        upper = NO_END if end_offset is None else end_offset
        next_fetch = fetch_offset
        epoch = -1
        pos = 0
        try:
            while len(data) - pos >= _LOG_OVERHEAD:
                end = pos + _LOG_OVERHEAD + struct.unpack_from(">i", data, pos + 8)[0]
                if end > len(data):
                    break  # partial batch: the next fetch starts with it
                if struct.unpack_from(">q", data, pos)[0] >= upper:
                    next_fetch = max(next_fetch, upper)  # [next_fetch, end) holds no record
                    break  # the range ends before this batch
                if data[pos + 16] != 2:
                    raise LegacyRecordFormatError(f"message format v{data[pos + 16]}")
                if end - pos < _HEADER.size:
                    raise IndexError("batch shorter than its header")
                header = _BatchHeader._make(_HEADER.unpack_from(data, pos))
                if self._check_crcs and calc_crc32c(view[pos + _CRC_START : end]) != header.crc:
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
                appended = bool(header.attributes & _LOG_APPEND_TIME)
                time_ms = header.max_timestamp if appended else header.first_timestamp
                batch = (header.base_offset, header.records, time_ms, appended)
                codec = header.attributes & _CODEC_MASK
                if codec:
                    raw = _decompress(codec, view[records_start:end], tp, header.base_offset)
                    scan.add(*batch, raw, 0, len(raw), fetch_offset, upper)
                else:
                    scan.add(*batch, data, records_start, end, fetch_offset, upper)
        except IndexError as exc:
            scan.truncate(before)
            raise RecordDecodeError(
                f"{tp}: corrupt record batch near byte {pos} of a fetch at offset "
                f"{fetch_offset}: {exc}"
            ) from None
        except BaseException:
            scan.truncate(before)
            raise
        taken = len(scan) - before
        if taken:
            self._added.append(_Added(tp, fetch_offset, before, taken))
        return ScannedFetch(next_fetch, epoch, pos, sum(scan.counts[before:]))

    def decode(self) -> DecodedRecords | None:
        """Decode every record added since the last call (``None``: none) and start afresh.
        A corrupt record is reported with the partition and fetch offset it came in."""
        scan, added = self._scan, self._added
        self._scan, self._added = RecordScan(), []
        if not added:
            return None
        try:
            fields = _decoded_fields(scan, self._include_headers, _where(added))
        except RecordDecodeError:
            if len(added) == 1:
                raise
            for part in added:  # the same error again, naming the partition
                stop = part.first_batch + part.batches
                _decoded_fields(scan.select(part.first_batch, stop), False, _where([part]))
            raise
        kept = fields.kept_per_batch
        firsts = np.array([part.first_batch for part in added], np.int64)
        rows = np.add.reduceat(kept, firsts).tolist() if len(kept) else [0] * len(added)
        partitions = tuple((part.tp, int(n)) for part, n in zip(added, rows, strict=True) if n > 0)
        return DecodedRecords(fields.columns, partitions)


def _where(added: Sequence[_Added]) -> str:
    if len(added) == 1:
        return f"{added[0].tp}: a fetch at offset {added[0].fetch_offset}"
    return f"a fetch of {len(added)} partitions"


def _decoded_fields(scan: RecordScan, include_headers: bool, where: str) -> DecodedFields:
    buf, heads = scan.buffer_and_heads()
    return decode_fields(buf, heads, scan, include_headers, where)


def decode_record_batches(
    buffer: bytes | memoryview,
    tp: TopicPartitionId,
    fetch_offset: int,
    *,
    read_committed: bool = False,
    aborted_transactions: Iterable[Any] = (),
    check_crcs: bool = False,
    include_headers: bool = False,
    end_offset: int | None = None,
) -> DecodedFetch:
    """Decode the complete v2 record batches in one partition's fetch response: the rules of
    :meth:`FetchDecoder.add`, for one answer."""
    decoder = FetchDecoder(
        read_committed=read_committed, check_crcs=check_crcs, include_headers=include_headers
    )
    scanned = decoder.add(
        buffer, tp, fetch_offset, aborted_transactions=aborted_transactions, end_offset=end_offset
    )
    decoded = decoder.decode()
    columns = decoded.columns if decoded is not None and len(decoded.columns) else None
    return DecodedFetch(
        columns,
        scanned.next_fetch_offset,
        scanned.leader_epoch,
        scanned.bytes_read,
        scanned.records_decoded,
    )


def decode_legacy_batches(
    buffer: bytes,
    fetch_offset: int,
    *,
    include_headers: bool = False,
    end_offset: int | None = None,
) -> DecodedFetch:
    """Message format v0/v1 (written by clients before Kafka 0.11), decoded record by record
    with kafka-python's public ``kafka.record`` module: slow, but such topics are rare. Records
    outside ``[fetch_offset, end_offset)`` are dropped; no transactions exist in these formats."""
    records: list[Any] = []
    next_fetch = fetch_offset
    decoded = 0
    records_view = MemoryRecords(buffer)
    while (batch := records_view.next_batch()) is not None:
        for record in batch:
            decoded += 1
            next_fetch = max(next_fetch, record.offset + 1)
            if record.offset >= fetch_offset and (end_offset is None or record.offset < end_offset):
                records.append(record)
    columns = columns_from_consumer_records(records, include_headers) if records else None
    return DecodedFetch(columns, next_fetch, -1, len(buffer), decoded)
