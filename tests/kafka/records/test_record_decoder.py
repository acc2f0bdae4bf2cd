"""Decoding whole fetch responses (decode_record_batches), one or many partitions together
(FetchDecoder). Record batches are built with
kafka-python's own batch builder and checked against kafka-python's own decoder."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from kafka.consumer.fetcher import ConsumerRecord
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from record_batch_builder import Record, build_batch, control_batch
from unaligned.errors import LegacyRecordFormatError, RecordDecodeError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records.record_columns import columns_from_consumer_records
from unaligned.kafka.records.record_decoder import (
    FetchDecoder,
    ScannedFetch,
    decode_legacy_batches,
    decode_record_batches,
)
from unaligned.kafka.records.record_scan import read_varint

TP = TopicPartitionId("events", 3)


def reference(buffer: bytes) -> list[Any]:
    """kafka-python's own decoding (no transaction filtering, control batches dropped)."""
    records = MemoryRecords(buffer)
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch.is_control_batch:
            continue
        out.extend(batch)
    return out


def random_records(rng: random.Random, n: int) -> list[Record]:
    records: list[Record] = []
    for i in range(n):
        size = rng.choice([0, 1, 10, 100, 300, 20_000])
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else os.urandom(size)
        headers = [(f"h{j}", None if j == 1 else os.urandom(j + 1)) for j in range(i % 3)]
        records.append((key, value, headers, 1_700_000_000_000 + rng.randint(-5, 5000)))
    return records


def assert_matches_reference(columns: Any, expected: list[Any]) -> None:
    assert columns.offsets.tolist() == [r.offset for r in expected]
    assert columns.timestamps_ms.tolist() == [r.timestamp for r in expected]
    assert columns.timestamp_types.tolist() == [r.timestamp_type for r in expected]
    assert columns.keys.to_pylist() == [r.key for r in expected]
    assert columns.values.to_pylist() == [r.value for r in expected]
    if columns.headers is not None:
        assert columns.headers.to_pylist() == [
            [{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in expected
        ]


# --- decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "codecs",
    [
        (0, 0, 0, 0),
        (1, 1, 1, 1),
        (2, 2, 2, 2),
        (3, 3, 3, 3),
        (4, 4, 4, 4),
        (1, 2, 3, 4),
        (0, 4, 0, 2),
    ],
    ids=["none", "gzip", "snappy", "lz4", "zstd", "mixed", "some"],
)
def test_decoded_columns_equal_kafka_pythons_records(codecs: tuple[int, ...]) -> None:
    rng = random.Random(7)
    buffer = b"".join(
        build_batch(base, random_records(rng, n), compression=codec)
        for (base, n), codec in zip([(0, 5), (5, 40), (45, 1), (46, 200)], codecs, strict=True)
    )
    decoded = decode_record_batches(buffer, TP, 0, include_headers=True)
    assert decoded.columns is not None
    assert_matches_reference(decoded.columns, reference(buffer))
    assert decoded.next_fetch_offset == 246
    assert decoded.bytes_read == len(buffer)


def test_records_before_the_fetch_offset_are_dropped() -> None:
    buffer = build_batch(100, random_records(random.Random(1), 10), compression=1)
    decoded = decode_record_batches(buffer, TP, 104)
    assert decoded.columns is not None
    assert decoded.columns.offsets.tolist() == list(range(104, 110))
    assert decoded.next_fetch_offset == 110


def test_the_end_offset_stops_the_walk_and_drops_records_at_or_after_it() -> None:
    first = build_batch(0, random_records(random.Random(4), 10))
    second = build_batch(10, random_records(random.Random(5), 10))
    third = build_batch(20, random_records(random.Random(6), 10))
    decoded = decode_record_batches(first + second + third, TP, 3, end_offset=15)
    assert decoded.columns is not None
    assert decoded.columns.offsets.tolist() == list(range(3, 15))
    # the second batch holds the end: it is read whole; the third starts at the end: not read
    assert decoded.next_fetch_offset == 20
    assert decoded.bytes_read == len(first) + len(second)
    assert decoded.records_decoded == 20  # 12 returned: 3 before the start, 5 from the end


def test_an_end_inside_a_compaction_gap_finishes_the_range() -> None:
    """Offsets [5, 40) hold no record (compacted away): a range ending at 30 is done once the
    batch at 40 is seen, not fetched again from 5."""
    first = build_batch(0, random_records(random.Random(7), 5))
    later = build_batch(40, random_records(random.Random(8), 5))
    decoded = decode_record_batches(first + later, TP, 0, end_offset=30)
    assert decoded.columns is not None and decoded.columns.offsets.tolist() == [0, 1, 2, 3, 4]
    assert decoded.next_fetch_offset == 30


def test_message_format_v1_is_decoded_with_kafka_pythons_records() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    for offset in range(5, 10):
        value = f"v{offset}".encode()
        builder.append(offset, timestamp=1_700_000_000_000 + offset, key=None, value=value)
    decoded = decode_legacy_batches(bytes(builder.build()), 6, end_offset=9)
    assert decoded.columns is not None
    assert decoded.columns.offsets.tolist() == [6, 7, 8]
    assert decoded.columns.values.to_pylist() == [b"v6", b"v7", b"v8"]
    assert decoded.columns.keys.to_pylist() == [None, None, None]
    assert decoded.columns.timestamps_ms.tolist() == [1_700_000_000_000 + o for o in (6, 7, 8)]
    assert decoded.next_fetch_offset == 10
    assert decoded.records_decoded == 5


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    first = build_batch(0, random_records(random.Random(2), 4))
    second = build_batch(4, random_records(random.Random(3), 4))
    decoded = decode_record_batches(first + second[: len(second) // 2], TP, 0)
    assert decoded.columns is not None and decoded.columns.offsets.tolist() == [0, 1, 2, 3]
    assert decoded.next_fetch_offset == 4
    assert decoded.bytes_read == len(first)
    empty = decode_record_batches(second[:30], TP, 4)
    assert empty.columns is None and empty.next_fetch_offset == 4 and empty.bytes_read == 0
    assert decoded.records_decoded == 4 and empty.records_decoded == 0


def test_log_append_time_batches_use_the_broker_time() -> None:
    buffer = build_batch(0, random_records(random.Random(4), 3), log_append_time=1_800_000_000_000)
    decoded = decode_record_batches(buffer, TP, 0)
    assert decoded.columns is not None
    assert decoded.columns.timestamps_ms.tolist() == [1_800_000_000_000] * 3
    assert decoded.columns.timestamp_types.tolist() == [1, 1, 1]


class Aborted:
    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id, self.first_offset = producer_id, first_offset


def transactional_log() -> bytes:
    rec = [(b"k", b"v", [], 1_000)]
    return b"".join(
        [
            build_batch(0, rec * 3, producer_id=7, transactional=True),  # 0-2 aborted
            control_batch(3, producer_id=7, commit=False),
            build_batch(4, rec * 2, producer_id=8, transactional=True),  # 4-5 committed
            control_batch(6, producer_id=8, commit=True),
            build_batch(7, rec),  # 7 plain
            build_batch(
                8, rec, producer_id=7, transactional=True
            ),  # 8 open (same producer, new txn)
        ]
    )


def test_read_committed_skips_aborted_batches_and_markers() -> None:
    decoded = decode_record_batches(
        transactional_log(), TP, 0, read_committed=True, aborted_transactions=[Aborted(7, 0)]
    )
    assert decoded.columns is not None
    assert decoded.columns.offsets.tolist() == [4, 5, 7, 8]
    assert decoded.next_fetch_offset == 9


def test_read_uncommitted_keeps_aborted_records_but_not_markers() -> None:
    decoded = decode_record_batches(
        transactional_log(), TP, 0, aborted_transactions=[Aborted(7, 0)]
    )
    assert decoded.columns is not None
    assert decoded.columns.offsets.tolist() == [0, 1, 2, 4, 5, 7, 8]


def test_a_fetch_of_only_markers_moves_the_next_offset_past_them() -> None:
    decoded = decode_record_batches(control_batch(41, 9, commit=True), TP, 41, read_committed=True)
    assert decoded.columns is None
    assert decoded.next_fetch_offset == 42


def test_corrupt_batches_raise_record_decode_error_naming_the_partition() -> None:
    buffer = bytearray(build_batch(0, random_records(random.Random(5), 20)))
    buffer[61] = 0x7E  # first record's length varint now claims 63 bytes
    with pytest.raises(RecordDecodeError, match="events-3"):
        decode_record_batches(bytes(buffer), TP, 0)
    good = bytearray(build_batch(0, random_records(random.Random(6), 5)))
    good[-1] ^= 0xFF  # flips a value byte: only the CRC notices
    with pytest.raises(RecordDecodeError, match="events-3.*CRC"):
        decode_record_batches(bytes(good), TP, 0, check_crcs=True)


# --- several partitions decoded together (FetchDecoder) ----------------------------------------


def test_answers_of_many_partitions_decode_together_as_each_decodes_alone() -> None:
    """Answers of 40 partitions (compressed, transactional, log-append time, with a range end
    and a fetch offset inside a batch) decoded together equal each one decoded alone, partition
    after partition in the order added; a partition with no record left is left out."""
    rng = random.Random(11)
    answers = []
    for p in range(40):
        base = p * 1_000
        buffer = build_batch(base, random_records(rng, 1 + p % 7), compression=p % 5)
        buffer += build_batch(base + 10, random_records(rng, 3), log_append_time=1_800_000_000_000)
        fetch_offset = base + (1 if p % 3 == 0 else 0)
        end = base + 11 if p % 4 == 0 else None
        if p == 13:
            fetch_offset = base + 13  # past every record: nothing of it is kept
        answers.append((TopicPartitionId(f"t{p % 3}", p), buffer, fetch_offset, end))
    decoder = FetchDecoder(include_headers=True)
    alone = []
    for tp, buffer, fetch_offset, end in answers:
        scanned = decoder.add(buffer, tp, fetch_offset, end_offset=end)
        one = decode_record_batches(buffer, tp, fetch_offset, include_headers=True, end_offset=end)
        assert scanned == ScannedFetch(
            one.next_fetch_offset, one.leader_epoch, one.bytes_read, one.records_decoded
        )
        if one.columns is not None:
            alone.append((tp, one.columns))
    assert decoder.pending_bytes > 0
    together = decoder.decode()
    assert together is not None and decoder.decode() is None and decoder.pending_bytes == 0
    assert together.partitions == tuple((tp, len(columns)) for tp, columns in alone)
    assert TopicPartitionId("t1", 13) not in dict(together.partitions)
    cols = together.columns
    assert cols.offsets.tolist() == [o for _, c in alone for o in c.offsets.tolist()]
    assert cols.timestamps_ms.tolist() == [t for _, c in alone for t in c.timestamps_ms.tolist()]
    assert cols.timestamp_types.tolist() == [
        t for _, c in alone for t in c.timestamp_types.tolist()
    ]
    assert cols.keys.to_pylist() == [k for _, c in alone for k in c.keys.to_pylist()]
    assert cols.values.to_pylist() == [v for _, c in alone for v in c.values.to_pylist()]
    assert cols.headers is not None
    assert cols.headers.to_pylist() == [
        h for _, c in alone if c.headers is not None for h in c.headers.to_pylist()
    ]


def test_a_legacy_or_corrupt_answer_leaves_nothing_behind_in_the_decoder() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    builder.append(1, timestamp=1_700_000_000_000, key=None, value=b"old")
    v2 = build_batch(0, random_records(random.Random(3), 1))
    corrupt = bytearray(build_batch(0, random_records(random.Random(4), 5)))
    corrupt[61] = 0x7E
    decoder = FetchDecoder()
    decoder.add(build_batch(0, [(b"k", b"kept", [], 1_000)]), TP, 0)
    with pytest.raises(LegacyRecordFormatError):  # a v2 batch, then a v1 one
        decoder.add(v2 + bytes(builder.build()), TopicPartitionId("old", 0), 0)
    with pytest.raises(RecordDecodeError, match="corrupt-1"):
        decoder.add(bytes(corrupt), TopicPartitionId("corrupt", 1), 0)
    decoded = decoder.decode()
    assert decoded is not None and decoded.partitions == ((TP, 1),)
    assert decoded.columns.values.to_pylist() == [b"kept"]


def test_a_corrupt_record_among_many_partitions_is_reported_with_its_partition() -> None:
    """Fields that overrun their record are found when the fields are decoded, together: the
    error still names the partition and fetch offset the record came in."""
    bad = bytearray(build_batch(50, [(b"k", b"v" * 100, [], 1_000)] * 3))
    pos = read_varint(bad, 61)[1] + 1  # record length, attributes
    pos = read_varint(bad, pos)[1]  # timestamp delta
    pos = read_varint(bad, pos)[1]  # offset delta
    bad[pos] = 0x7E  # the first key now claims 63 bytes: past its record
    decoder = FetchDecoder()
    for p in range(5):
        buffer = bytes(bad) if p == 3 else build_batch(50, random_records(random.Random(p), 4))
        decoder.add(buffer, TopicPartitionId("events", p), 50)
    with pytest.raises(RecordDecodeError, match="events-3: a fetch at offset 50"):
        decoder.decode()


def test_consumer_records_convert_to_the_same_columns() -> None:
    buffer = build_batch(10, random_records(random.Random(8), 30))
    consumer_records = [
        ConsumerRecord(
            TP.topic,
            TP.partition,
            0,
            r.offset,
            r.timestamp,
            r.timestamp_type,
            r.key,
            r.value,
            r.headers,
            None,
            0,
            0,
            0,
        )
        for r in reference(buffer)
    ]
    converted = columns_from_consumer_records(consumer_records, include_headers=True)
    decoded = decode_record_batches(buffer, TP, 10, include_headers=True).columns
    assert decoded is not None
    for name in ("offsets", "timestamps_ms", "timestamp_types"):
        assert getattr(converted, name).tolist() == getattr(decoded, name).tolist()
    for name in ("keys", "values", "headers"):
        assert getattr(converted, name).equals(getattr(decoded, name))
