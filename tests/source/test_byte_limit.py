"""``maxBytesPerTrigger`` (:mod:`unaligned.source.planning.byte_limit`): the driver measures the
records of each candidate range and ends it at the record whose bytes reach the partition's share
of the cap. A fake read path yields the records as the read tasks would."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from fake_offset_lookup import FakeLookup, reader_for
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition
from unaligned.source.planning.byte_limit import byte_limit, record_bytes

TP = TopicPartitionId
A0, A1 = TP("a", 0), TP("a", 1)
OPTIONS = SourceOptions.parse({"kafka.bootstrap.servers": "x:1", "subscribe": "a"})


class FakeLog:
    """Records of given sizes per partition, offsets from 0; yields ``per_batch`` at a time and
    counts what was read."""

    def __init__(self, sizes: Mapping[TopicPartitionId, Sequence[int]], per_batch: int = 3):
        self.sizes = sizes
        self.per_batch = per_batch
        self.read: dict[TopicPartitionId, int] = {}

    def __call__(self, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
        (rng,) = part.ranges
        for first in range(rng.start, rng.end, self.per_batch):
            last = min(first + self.per_batch, rng.end)
            sizes = self.sizes[rng.tp][first:last]
            self.read[rng.tp] = last
            yield pa.record_batch(
                {
                    "key": pa.array(
                        [None if i % 2 else b"k" for i in range(len(sizes))], pa.binary()
                    ),
                    "value": pa.array(
                        [b"v" * (s - (0 if i % 2 else 1)) for i, s in enumerate(sizes)], pa.binary()
                    ),
                    "offset": pa.array(range(first, last), pa.int64()),
                }
            )


def test_record_bytes_are_key_and_value_bytes_of_sliced_batches() -> None:
    batch = pa.record_batch(
        {"key": pa.array([b"ab", None, b""], pa.binary()), "value": pa.array([b"x", b"yyy", None])}
    )
    assert record_bytes(batch).tolist() == [3, 3, 0]
    assert record_bytes(batch.slice(1)).tolist() == [3, 0]


def test_each_partition_ends_at_the_record_that_reaches_its_share() -> None:
    log = FakeLog({A0: [100] * 50, A1: [100_000] * 5 + [100] * 50})
    ends = byte_limit(OPTIONS, {A0: 0, A1: 0}, {A0: 50, A1: 55}, 300_000, read=log)
    # 150,000 bytes each: a0 takes everything it has (5,000), a1 two large records, the second
    # past its share (one record over at most)
    assert ends == {A0: 50, A1: 2}
    assert log.read[A1] <= 3, "the read stops at the record that reaches the share"


def test_a_record_larger_than_the_share_still_moves_the_partition() -> None:
    log = FakeLog({A0: [1_000_000] * 3})
    assert byte_limit(OPTIONS, {A0: 1}, {A0: 3}, 10, read=log) == {A0: 2}


def test_partitions_without_backlog_are_not_read() -> None:
    log = FakeLog({A0: [100] * 10, A1: [100] * 10})
    assert byte_limit(OPTIONS, {A0: 10, A1: 4}, {A0: 10, A1: 10}, 250, read=log) == {A0: 10, A1: 7}
    assert A0 not in log.read


def test_the_source_offers_read_max_bytes_and_caps_its_batches_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from unaligned.source.planning import byte_limit as module

    log = FakeLog({A0: [100] * 10 + [10_000] * 10})
    measured = module.byte_limit
    monkeypatch.setattr(module, "byte_limit", lambda *args: measured(*args, read=log))
    lookup = FakeLookup({"a": 1})
    lookup.ends = {A0: 20}
    reader = reader_for(lookup, subscribe="a", maxBytesPerTrigger="2KB")
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxBytes) and limit.max_bytes == 2048
    start = {"offsets": {"a": {"0": 0}}, "idleBarrier": 0, "barrierToken": "earlierRun"}
    first = reader.latestOffset(start, limit)
    assert first["offsets"] == {"a": {"0": 11}}  # ten of 100 B, then one of 10,000 B
    assert reader.latestOffset(first, ReadMaxBytes(30_000))["offsets"] == {"a": {"0": 14}}
    assert reader.latestOffset(first, ReadAllAvailable())["offsets"] == {"a": {"0": 20}}
