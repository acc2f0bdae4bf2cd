"""Splitting an encoded v2 record batch the broker refused as too large into two.

A broker refuses a batch larger than its topic's ``max.message.bytes`` with
``MESSAGE_TOO_LARGE`` (``RECORD_LIST_TOO_LARGE`` past the segment size) before it checks or
advances the producer's sequence, so the two halves are sent in its place, within the same
transaction, from the same base sequence: the first half keeps it, the second starts after the
first half's records (what Kafka's Java producer does in ``ProducerBatch.split``). Batches of the
partition sent behind the refused one are answered ``OUT_OF_ORDER_SEQUENCE_NUMBER`` and sent
again after the halves (:mod:`unaligned.kafka.produce.produce_requests`).

:func:`split_batch` rewrites only what a split changes: each record's offset delta (they must
run 0, 1, ... in a batch), the header's counts, base sequence, max timestamp and CRC; keys,
values, headers and timestamps are copied as they are (the wire layout is in
:mod:`unaligned.kafka.records.record_batch_layout`). It runs only on a refusal, so it loops in
Python.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from kafka.record.util import calc_crc32c

from kafka import codec as kafka_codec
from unaligned.kafka.records.record_batch_layout import HEADER_SIZE, increment_sequence
from unaligned.kafka.records.record_scan import read_varint

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CODEC_MASK = 0x07
_CODECS: dict[int, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    1: (kafka_codec.gzip_encode, kafka_codec.gzip_decode),
    2: (kafka_codec.snappy_encode, kafka_codec.snappy_decode),
    3: (kafka_codec.lz4_encode, kafka_codec.lz4_decode),
    4: (kafka_codec.zstd_encode, kafka_codec.zstd_decode),
}


def _varint(value: int) -> bytes:
    """Kafka's zig-zag varint of ``value``."""
    zz = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zz >= 0x80:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


def _records(section: bytes, count: int) -> list[tuple[int, bytes, bytes]]:
    """``(timestamp delta, bytes before the offset delta, bytes after it)`` of each record."""
    records: list[tuple[int, bytes, bytes]] = []
    pos = 0
    for _ in range(count):
        length, body = read_varint(section, pos)
        end = body + length
        delta, at_offset = read_varint(section, body + 1)  # after the attributes byte
        _, after_offset = read_varint(section, at_offset)
        records.append((delta, section[body:at_offset], section[after_offset:end]))
        pos = end
    return records


def _batch(fields: tuple[int, ...], records: list[tuple[int, bytes, bytes]], seq: int) -> bytes:
    """A batch of ``records`` with the refused batch's header ``fields``, from sequence ``seq``."""
    _, _, leader_epoch, magic, _, attributes, _, base_time, _, pid, epoch, _, _ = fields
    section = b"".join(
        _varint(len(head) + len(offset := _varint(i)) + len(tail)) + head + offset + tail
        for i, (_, head, tail) in enumerate(records)
    )
    codec = attributes & _CODEC_MASK
    if codec:
        section = _CODECS[codec][0](section)
    buf = bytearray(HEADER_SIZE) + section
    count = len(records)
    max_time = base_time + max(delta for delta, _, _ in records)
    _HEADER.pack_into(
        buf, 0, 0, len(buf) - 12, leader_epoch, magic, 0, attributes, count - 1,
        base_time, max_time, pid, epoch, seq, count,
    )  # fmt: skip
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def split_batch(data: bytes) -> tuple[bytes, bytes, int]:
    """``(first half, second half, records in the first half)`` of an encoded v2 batch of two
    or more records; the halves keep its producer id, epoch, transactional bit and codec."""
    fields = _HEADER.unpack_from(data, 0)
    attributes, count, base_sequence = fields[5], fields[12], fields[11]
    if count < 2:
        raise ValueError(f"a record batch of {count} record(s) cannot be split")
    section = data[HEADER_SIZE:]
    codec = attributes & _CODEC_MASK
    if codec:
        section = bytes(_CODECS[codec][1](section))
    records = _records(section, count)
    half = count // 2
    second_sequence = base_sequence
    if base_sequence >= 0:
        second_sequence = increment_sequence(base_sequence, half)
    return (
        _batch(fields, records[:half], base_sequence),
        _batch(fields, records[half:], second_sequence),
        half,
    )


def record_count(data: bytes) -> int:
    """The records of an encoded v2 batch (its header's ``recordCount``)."""
    count: int = _HEADER.unpack_from(data, 0)[12]
    return count
