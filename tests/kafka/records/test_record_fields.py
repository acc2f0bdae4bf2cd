"""Decoding the records inside v2 record batches (decode_fields; where records begin is
test_record_scan.py). Records are built with kafka-python's own batch builder and checked
against its own decoder; whole fetch responses (framing, compression, transactions) are tested
in test_record_decoder.py."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from unaligned.errors import RecordDecodeError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records import record_fields
from unaligned.kafka.records.record_fields import decode_fields
from unaligned.kafka.records.record_scan import NO_END, RecordScan, read_varint

TP = TopicPartitionId("events", 3)
HEADER_SIZE = 61  # a v2 batch header; the batch's records follow it
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def batch(records: list[Record], first_timestamp: int) -> bytes:
    """An uncompressed v2 batch (base offset 0), timestamps 0, 7, 14, ... ms after the first."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for delta, (key, value, headers) in enumerate(records):
        ts = first_timestamp + 7 * delta
        builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def mixed_records(n: int) -> list[Record]:
    """Null and empty keys and values, 1- to 3-byte length varints, headers with null values."""
    sizes = [0, 1, 63, 64, 300, 20_000]
    return [
        (
            None if i % 5 == 0 else f"k{i}".encode() * (i % 3),
            None if i % 7 == 3 else os.urandom(sizes[i % len(sizes)]),
            [(f"h{j}", None if j == 1 else os.urandom(j)) for j in range(i % 3)],
        )
        for i in range(n)
    ]


def kafka_pythons(buf: bytes, base_offset: int) -> list[tuple[Any, ...]]:
    """kafka-python's decoding of one batch, with offsets moved to ``base_offset``."""
    return [
        (base_offset + r.offset, r.timestamp, r.key, r.value, r.headers or None)
        for r in MemoryRecords(buf).next_batch()
    ]


def decoded(scan: RecordScan) -> list[tuple[Any, ...]]:
    buf, heads = scan.buffer_and_heads()
    columns = decode_fields(buf, heads, scan, True, str(TP)).columns
    assert columns.headers is not None
    headers = [
        None if h is None else [(kv["key"], kv["value"]) for kv in h]
        for h in columns.headers.to_pylist()
    ]
    return list(
        zip(
            columns.offsets.tolist(),
            columns.timestamps_ms.tolist(),
            columns.keys.to_pylist(),
            columns.values.to_pylist(),
            headers,
            strict=True,
        )
    )


def test_records_of_batches_sharing_one_buffer_decode_as_kafka_python_does() -> None:
    first, second = batch(mixed_records(40), 1_000), batch(mixed_records(25), 2_000)
    data = b"\x00" * 5 + first + second  # sections anywhere in the fetch buffer
    expected = kafka_pythons(first, 100) + kafka_pythons(second, 140)
    for lower, upper, kept in [(100, NO_END, expected), (150, NO_END, expected[50:])]:
        scan = RecordScan()
        scan.add(100, 40, 1_000, False, data, 5 + HEADER_SIZE, 5 + len(first), lower, upper)
        scan.add(140, 25, 2_000, False, data, 5 + len(first) + HEADER_SIZE, len(data), lower, upper)
        buf, _ = scan.buffer_and_heads()
        assert buf is data  # one buffer: no copy
        assert decoded(scan) == kept  # records before the lower bound dropped


def test_each_batch_keeps_the_offsets_between_its_own_bounds() -> None:
    """Batches of several partitions in one scan, each partition's answer its own buffer, each
    batch with its partition's range: what each keeps, and how many, in order."""
    first, second, third = (batch(mixed_records(n), 1_000) for n in (30, 20, 10))
    scan = RecordScan()
    scan.add(0, 30, 1_000, False, first, HEADER_SIZE, len(first), 5, 25)
    scan.add(700, 20, 1_000, False, second, HEADER_SIZE, len(second), 690, NO_END)
    scan.add(40, 10, 1_000, False, b"\x07" + third, 1 + HEADER_SIZE, 1 + len(third), 48, 49)
    buf, heads = scan.buffer_and_heads()
    fields = decode_fields(buf, heads, scan, False, "three partitions")
    assert fields.kept_per_batch.tolist() == [20, 20, 1]
    assert fields.columns.offsets.tolist() == list(range(5, 25)) + list(range(700, 720)) + [48]
    expected = (
        kafka_pythons(first, 0)[5:25] + kafka_pythons(second, 700) + kafka_pythons(third, 40)[8:9]
    )
    assert fields.columns.values.to_pylist() == [r[3] for r in expected]
    assert fields.columns.keys.to_pylist() == [r[2] for r in expected]


def test_log_append_time_batches_stamp_every_record_with_the_broker_time() -> None:
    data = batch(mixed_records(4), 1_000)
    scan = RecordScan()
    scan.add(0, 4, 9_999, True, data, HEADER_SIZE, len(data))
    buf, heads = scan.buffer_and_heads()
    columns = decode_fields(buf, heads, scan, False, str(TP)).columns
    assert columns.timestamps_ms.tolist() == [9_999] * 4
    assert columns.timestamp_types.tolist() == [1] * 4
    assert columns.headers is None


def test_fields_overrunning_their_record_raise_record_decode_error_naming_the_partition() -> None:
    data = bytearray(batch([(b"k", b"v" * 100, [])] * 3, 1_000))
    pos = read_varint(data, HEADER_SIZE)[1] + 1  # record length, attributes
    pos = read_varint(data, pos)[1]  # timestamp delta
    pos = read_varint(data, pos)[1]  # offset delta
    assert read_varint(data, pos) == (1, pos + 1)  # the first key's length
    data[pos] = 0x7E  # now 63 bytes: the key runs past the record
    scan = RecordScan()
    scan.add(0, 3, 1_000, False, bytes(data), HEADER_SIZE, len(data))  # lengths still add up
    buf, heads = scan.buffer_and_heads()
    with pytest.raises(RecordDecodeError, match="events-3"):
        decode_fields(buf, heads, scan, False, str(TP))


def _ranges(rng: random.Random, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint increasing byte ranges over a random buffer: of one length and stride, of
    random lengths and gaps, or fixed with a change now and then (a batch boundary)."""
    starts, lengths, pos = [], [], rng.randint(0, 5)
    length, gap = rng.randint(1, 20), rng.randint(0, 5)
    for _ in range(rng.randint(1, 60)):
        if mode == "random" or (mode == "mostly fixed" and rng.random() < 0.1):
            length, gap = rng.randint(1, 20), rng.randint(0, 5)
        pos += gap
        starts.append(pos)
        lengths.append(length)
        pos += length
    arr = np.frombuffer(rng.randbytes(pos + 3), np.uint8)
    return arr, np.array(starts, np.int64), np.array(lengths, np.int64)


@pytest.mark.parametrize("most_runs", [-1.0, 1 / 16, 2.0])  # always masked, default, strided
def test_gathered_bytes_are_the_ranges_concatenated(
    monkeypatch: pytest.MonkeyPatch, most_runs: float
) -> None:
    monkeypatch.setattr(record_fields, "_MOST_STRIDED_RUNS", most_runs)
    rng = random.Random(11)
    checked = 0
    for _ in range(300):
        for mode in ("fixed", "random", "mostly fixed"):
            arr, starts, lengths = _ranges(rng, mode)
            expected = b"".join(
                arr[s : s + n].tobytes()
                for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
            )
            gathered = record_fields._gather(arr, starts, lengths)
            assert gathered.dtype == np.uint8
            assert gathered.tobytes() == expected, mode
            checked += 1
    assert checked == 900


def test_fixed_size_records_of_one_batch_are_one_strided_run() -> None:
    starts = np.arange(8, 8 + 110 * 50, 110, dtype=np.int64)
    lengths = np.full(50, 100, np.int64)
    runs = record_fields._strided_runs(starts, lengths, 50)
    assert runs is not None and runs.tolist() == [0]
    # a second batch (61 more bytes of header) and longer values start new runs
    starts[30:] += 61
    lengths[40:] = 101
    starts[41:] += np.arange(1, 10)  # one byte longer each: 111 apart
    runs = record_fields._strided_runs(starts, lengths, 50)
    assert runs is not None and runs.tolist() == [0, 30, 40]
    assert record_fields._strided_runs(starts, lengths, 3) is None
    # ranges of alternating distances pair up
    starts[40:] += np.arange(10) % 2
    runs = record_fields._strided_runs(starts, lengths, 50)
    assert runs is not None and runs.tolist() == [0, 30, 40, 42, 44, 46, 48]
