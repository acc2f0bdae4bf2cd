"""``Fetch`` v11 on the wire: the request's bytes, and the response parsed from a memoryview.

The read path's own connections (:mod:`unaligned.kafka.fetch.fetch_connections`) send the request
that :func:`encode_fetch_request` builds and receive the response into a reused buffer;
:func:`parse_fetch_response` reads it in place, so each partition's record batches stay a
slice of that buffer (:attr:`PartitionData.records`, a memoryview: the caller copies what it
keeps before the buffer is read into again). Version 11 is the newest without flexible fields
(compact arrays, tagged fields); it has everything the read needs (isolation level, aborted
transactions, log start offset), and every broker since Kafka 2.3 answers it (Kafka 4 dropped
only v0-v3). The field names follow the protocol's (and kafka-python's), so
:mod:`unaligned.kafka.fetch.range_fetch` reads either kind of answer the same way.

Request: header v1 (api key 1, version, correlation id, client id); then replica id -1, max
wait, min bytes, max bytes, isolation level, session id 0 and epoch -1 (no fetch session),
topics (each partition with the leader epoch the client knows, KIP-320, so a broker that is not
the leader of that epoch answers ``FENCED_LEADER_EPOCH`` / ``UNKNOWN_LEADER_EPOCH``), no
forgotten topics, the client's rack (``kafka.client.rack``, KIP-392). Response: header v0
(correlation id), then throttle, error code, session id, and per topic and partition: index,
error code, high watermark, last stable offset, log start offset, aborted transactions
(``(producer id, first offset)``, null or an array), preferred read replica (-1: none),
records (nullable bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from unaligned.errors import RecordDecodeError

FETCH_API_KEY = 1
FETCH_VERSION = 11

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_FETCH_TOP = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, iso, session
_PARTITION_REQ = struct.Struct(">iiqqi")  # partition, leader epoch, offset, log start, max bytes
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start
_ABORTED = struct.Struct(">qq")  # producer id, first offset


@dataclass(frozen=True)
class PartitionFetch:
    """One partition of a request: from ``offset`` (next offset to read), at most
    ``max_bytes``; ``leader_epoch``: the partition's current leader epoch (-1: unknown)."""

    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int = -1


@dataclass(frozen=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True)
class PartitionData:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTransaction, ...] | None
    preferred_read_replica: int
    records: memoryview | None


@dataclass(frozen=True)
class TopicData:
    topic: str
    partitions: tuple[PartitionData, ...]


@dataclass(frozen=True)
class FetchResponse:
    throttle_time_ms: int
    error_code: int
    responses: tuple[TopicData, ...]


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def encode_fetch_request(
    correlation_id: int,
    client_id: str,
    topics: Sequence[tuple[str, Sequence[PartitionFetch]]],
    *,
    max_wait_ms: int,
    max_bytes: int,
    read_committed: bool,
    rack_id: str = "",
) -> bytes:
    """The framed request (size prefix included), ready to send."""
    parts = [
        _HEADER.pack(FETCH_API_KEY, FETCH_VERSION, correlation_id),
        _string(client_id),
        _FETCH_TOP.pack(-1, max_wait_ms, 1, max_bytes, 1 if read_committed else 0, 0, -1),
        _I32.pack(len(topics)),
    ]
    for topic, partitions in topics:
        parts.append(_string(topic))
        parts.append(_I32.pack(len(partitions)))
        parts.extend(
            _PARTITION_REQ.pack(p.partition, p.leader_epoch, p.offset, -1, p.max_bytes)
            for p in partitions
        )
    parts.append(_I32.pack(0))  # forgotten topics
    parts.append(_string(rack_id))
    body = b"".join(parts)
    return _I32.pack(len(body)) + body


class _Reader:
    """Reads big-endian fields from a memoryview, bounds-checked."""

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0

    def take(self, layout: struct.Struct) -> tuple[int, ...]:
        end = self.pos + layout.size
        if end > len(self.view):
            raise RecordDecodeError("a Fetch response ended inside a field")
        values = layout.unpack_from(self.view, self.pos)
        self.pos = end
        return values

    def int32(self) -> int:
        return self.take(_I32)[0]

    def string(self) -> str:
        (size,) = self.take(_I16)
        return bytes(self.slice(max(size, 0))).decode("utf-8")

    def slice(self, size: int) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.view):
            raise RecordDecodeError("a Fetch response ended inside a field")
        piece = self.view[self.pos : end]
        self.pos = end
        return piece


def response_correlation_id(frame: memoryview) -> int:
    """The correlation id a response frame (size prefix removed) answers."""
    return _Reader(frame).int32()


def parse_fetch_response(frame: memoryview) -> FetchResponse:
    """The v11 response in ``frame`` (size prefix removed, correlation id first); records are
    slices of ``frame``."""
    reader = _Reader(frame)
    reader.int32()  # correlation id (checked by the connection)
    throttle_time_ms = reader.int32()
    (error_code,) = reader.take(_I16)
    reader.int32()  # session id
    topics = []
    for _ in range(reader.int32()):
        topic = reader.string()
        partitions = []
        for _ in range(reader.int32()):
            index, error, high_watermark, lso, log_start = reader.take(_PARTITION_HEAD)
            count = reader.int32()
            aborted = (
                None
                if count < 0
                else tuple(AbortedTransaction(*reader.take(_ABORTED)) for _ in range(count))
            )
            replica = reader.int32()
            size = reader.int32()
            records = None if size < 0 else reader.slice(size)
            partitions.append(
                PartitionData(
                    index, error, high_watermark, lso, log_start, aborted, replica, records
                )
            )
        topics.append(TopicData(topic, tuple(partitions)))
    return FetchResponse(throttle_time_ms, error_code, tuple(topics))
