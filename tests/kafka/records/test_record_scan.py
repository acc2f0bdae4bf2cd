"""Where the records of v2 record batches begin (RecordScan): record starts found in runs and by
the loop, checked against kafka-python's own decoder, a scan's bytes kept as batches come and
go, and batches whose lengths do not add up refused."""

from __future__ import annotations

import pytest
from tests.kafka.records.test_record_fields import (
    HEADER_SIZE,
    Record,
    batch,
    decoded,
    kafka_pythons,
    mixed_records,
)

from unaligned.kafka.records.record_scan import RecordScan, read_varint


def test_a_scan_forgets_the_batches_after_a_truncation() -> None:
    first, second = batch(mixed_records(3), 1_000), batch(mixed_records(4), 2_000)
    scan = RecordScan()
    scan.add(0, 3, 1_000, False, first, HEADER_SIZE, len(first))
    scan.add(3, 4, 2_000, False, second, HEADER_SIZE, len(second))
    both = len(first) + len(second) - 2 * HEADER_SIZE
    assert scan.section_bytes == both  # kept as batches are added, not summed when asked
    assert scan.select(1, 2).section_bytes == len(second) - HEADER_SIZE
    scan.truncate(1)
    assert len(scan) == 1 and scan.section_bytes == len(first) - HEADER_SIZE
    assert decoded(scan) == kafka_pythons(first, 0)
    assert decoded(scan.select(0, 1)) == decoded(scan)


@pytest.mark.parametrize(
    "sizes",
    [
        [100],  # one size: the length changes only as the deltas need more varint bytes
        [100, 100, 100, 37],  # runs broken every fourth record
        [0, 1, 63, 64, 300],  # lengths that vary: the loop takes over
        [5] * 50 + [900] * 30 + [5],  # two long runs, then a short one
    ],
)
def test_record_starts_found_in_runs_of_one_length_match_kafka_python(sizes: list[int]) -> None:
    """10,000 records in one batch: offset and timestamp deltas pass the 64 and 8,192 varint
    boundaries, so even equal payloads make records of three lengths."""
    records: list[Record] = [(b"k", b"v" * sizes[i % len(sizes)], []) for i in range(10_000)]
    data = batch(records, 1_000)
    scan = RecordScan()
    scan.add(0, 10_000, 1_000, False, data, HEADER_SIZE, len(data))
    assert decoded(scan) == kafka_pythons(data, 0)


def test_a_batch_whose_lengths_do_not_add_up_is_refused() -> None:
    data = batch([(b"k", b"v" * 100, [])] * 100, 1_000)
    scan = RecordScan()
    with pytest.raises(IndexError):
        scan.add(0, 101, 1_000, False, data, HEADER_SIZE, len(data))
    with pytest.raises(IndexError):
        RecordScan().add(0, 100, 1_000, False, data + b"\x02x", HEADER_SIZE, len(data) + 2)


def test_decompressed_batches_in_their_own_buffers_keep_their_order() -> None:
    first, second = batch(mixed_records(30), 1_000), batch(mixed_records(30), 2_000)
    scan = RecordScan()
    scan.add(0, 30, 1_000, False, first, HEADER_SIZE, len(first))
    scan.add(30, 30, 2_000, False, b"\xff" * 3 + second, 3 + HEADER_SIZE, 3 + len(second))
    assert decoded(scan) == kafka_pythons(first, 0) + kafka_pythons(second, 30)


def test_a_record_count_that_does_not_fit_the_section_is_an_index_error() -> None:
    data = batch(mixed_records(6), 1_000)
    with pytest.raises(IndexError, match="do not add up"):
        RecordScan().add(0, 5, 1_000, False, data, HEADER_SIZE, len(data))
    with pytest.raises(IndexError):
        RecordScan().add(0, 7, 1_000, False, data, HEADER_SIZE, len(data))


@pytest.mark.parametrize(
    "encoded, value",
    [(b"\x00", 0), (b"\x01", -1), (b"\x02", 1), (b"\xac\x02", 150), (b"\xff\xff\x03", -32768)],
)
def test_read_varint_decodes_zig_zag_and_returns_the_next_position(
    encoded: bytes, value: int
) -> None:
    assert read_varint(b"\x09" + encoded + b"\x09", 1) == (value, 1 + len(encoded))
