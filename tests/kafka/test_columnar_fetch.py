"""The pinned kafka-python fetcher hook (ColumnarPartitionRecords). It stands in for private
kafka-python API, so the first test fails when that API changes. Fetch responses are built with
kafka-python's own batch builders (record data checked in tests/test_kafka_record_decoder.py)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from kafka.consumer.fetcher import Fetcher
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

import kafka
from record_batch_builder import Record, build_batch, control_batch
from unaligned.kafka.columnar_fetch import PINNED_KAFKA_PYTHON, ColumnarPartitionRecords
from unaligned.kafka.partitions import TopicPartitionId

TP = TopicPartitionId("events", 3)


def data_batch(count: int) -> bytes:
    """A v2 batch of ``count`` records at offsets 0..count-1 (null keys for odd offsets)."""
    records: list[Record] = [
        (None if i % 2 else f"key-{i}".encode(), b"v" * i, [], 1_700_000_000_000 + i)
        for i in range(count)
    ]
    return build_batch(0, records)


def commit_marker(offset: int, producer_id: int) -> bytes:
    """A transaction commit marker as the broker writes it: a control batch at ``offset``."""
    return control_batch(offset, producer_id, commit=True)


def test_kafka_python_fetcher_still_fits_the_columnar_hook() -> None:
    assert kafka.__version__ == PINNED_KAFKA_PYTHON
    original = inspect.signature(Fetcher.PartitionRecords.__init__).parameters
    ours = inspect.signature(ColumnarPartitionRecords.__init__).parameters
    assert [p for p in original if p != "self"] == [
        p for p in ours if p not in ("self", "include_headers", "fallback")
    ]
    assert "_buffer" in MemoryRecords.__slots__
    assert "self.PartitionRecords(" in inspect.getsource(Fetcher._parse_fetched_data)
    append = inspect.getsource(Fetcher._append)
    assert "part.take(" in append and "part.next_fetch_offset" in append
    assert "partition_records.bytes_read" in inspect.getsource(Fetcher._on_partition_records_drain)


def test_columnar_partition_records_hand_out_one_chunk_then_move_the_position() -> None:
    buffer = data_batch(12) + commit_marker(12, 3)
    drained: list[Any] = []
    part = ColumnarPartitionRecords(
        0,
        TP,
        MemoryRecords(buffer),
        on_drain=drained.append,
        include_headers=False,
        fallback=Fetcher.PartitionRecords,
    )
    assert (
        part and part.next_fetch_offset == 0
    )  # the fetcher checks this against its position first
    chunks = part.take(500)
    assert len(chunks) == 1 and chunks[0].offsets.tolist() == list(range(12))
    assert part.next_fetch_offset == 13 and not part and drained == [part]
    assert part.take(500) == []
    assert isinstance(chunks[0].offsets, np.ndarray)


def test_message_format_v1_goes_through_kafka_pythons_records() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    for offset in range(5, 9):
        value = f"v{offset}".encode()
        builder.append(offset, timestamp=1_700_000_000_000 + offset, key=None, value=value)
    part = ColumnarPartitionRecords(
        6,
        TP,
        MemoryRecords(bytes(builder.build())),
        include_headers=True,
        fallback=Fetcher.PartitionRecords,
    )
    chunks = part.take(500)
    assert len(chunks) == 1
    assert chunks[0].offsets.tolist() == [6, 7, 8]
    assert chunks[0].values.to_pylist() == [b"v6", b"v7", b"v8"]
    assert chunks[0].keys.to_pylist() == [None, None, None]
    assert chunks[0].timestamps_ms.tolist() == [1_700_000_000_000 + o for o in (6, 7, 8)]
    assert part.next_fetch_offset == 9 and not part
