"""Produce and read-to-end helpers of the embedded broker, against stand-in clients (no broker;
the real clients: integration/test_embedded_kafka.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kafka import TopicPartition
from unaligned.errors import EmbeddedKafkaError
from unaligned.testing.topic_records import read_to_end, send_and_wait


class FakeFuture:
    def __init__(self, error: Exception | None) -> None:
        self._error = error

    def get(self, timeout: float) -> None:
        if self._error is not None:
            raise self._error


class FakeProducer:
    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.flushed = False
        self._error = error

    def send(self, topic: str, **kwargs: Any) -> FakeFuture:
        self.sent.append((topic, kwargs))
        return FakeFuture(self._error)

    def flush(self, timeout: float) -> None:
        self.flushed = True


class Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class FakeConsumer:
    """Partitions hold records at offsets ``first .. end - 1``; each poll returns up to two
    records per assigned partition, and may return records past the end offset seen at call
    time (as a broker does when producers keep writing)."""

    def __init__(self, logs: dict[int, tuple[int, int]], extra: int = 0, stuck: bool = False):
        self._logs = logs
        self._extra = extra
        self._stuck = stuck
        self._positions: dict[TopicPartition, int] = {}

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._positions = {tp: 0 for tp in partitions}

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._positions[tp] = self._logs[tp.partition][0]

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._logs[tp.partition][1] for tp in partitions}

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[Record]]:
        if self._stuck:
            return {}
        out = {}
        for tp, position in self._positions.items():
            end = self._logs[tp.partition][1] + self._extra
            batch = [Record(o) for o in range(position, min(position + 2, end))]
            if batch:
                out[tp] = batch
                self._positions[tp] = batch[-1].offset + 1
        return out


def test_send_and_wait_sends_every_record_then_flushes() -> None:
    producer = FakeProducer()
    records = [(0, b"k", b"v", [("h", b"1")], 5), (None, None, b"w", None, None)]
    send_and_wait(producer, "t", records, 1.0)  # type: ignore[arg-type]
    assert producer.flushed
    assert producer.sent == [
        (
            "t",
            {
                "value": b"v",
                "key": b"k",
                "headers": [("h", b"1")],
                "partition": 0,
                "timestamp_ms": 5,
            },
        ),
        (
            "t",
            {"value": b"w", "key": None, "headers": None, "partition": None, "timestamp_ms": None},
        ),
    ]


def test_a_failed_send_names_the_topic() -> None:
    producer = FakeProducer(error=RuntimeError("boom"))
    with pytest.raises(EmbeddedKafkaError, match="producing to topic 't' failed"):
        send_and_wait(producer, "t", [(None, None, b"v", None, None)], 1.0)  # type: ignore[arg-type]


def test_read_to_end_orders_by_partition_then_offset_and_stops_at_the_end() -> None:
    consumer = FakeConsumer({1: (3, 6), 0: (0, 5), 2: (4, 4)}, extra=3)
    partitions = [TopicPartition("t", p) for p in (1, 0, 2)]
    records = read_to_end(consumer, "t", partitions, 10.0)  # type: ignore[arg-type]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 3, 4, 5]


def test_read_to_end_is_bounded() -> None:
    consumer = FakeConsumer({0: (0, 5)}, stuck=True)
    with pytest.raises(EmbeddedKafkaError, match="did not finish within 0 s"):
        read_to_end(consumer, "t", [TopicPartition("t", 0)], 0.0)  # type: ignore[arg-type]
