"""row_routing: each row's (topic, partition) for a whole chunk, and the per-partition groups."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from unaligned.errors import SchemaMismatchError
from unaligned.kafka.produce.partitioner import StickyPartition, murmur2
from unaligned.kafka.produce.row_routing import PartitionRows, route_rows


def _murmur_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _where(groups: list[PartitionRows]) -> dict[int, tuple[str, int]]:
    placed: dict[int, tuple[str, int]] = {}
    for group in groups:
        for row in group.rows.tolist():
            assert row not in placed, f"row {row} in two groups"
            placed[row] = (group.topic, group.partition)
    return placed


def test_every_row_once_in_increasing_order_per_partition_keyed_by_murmur2() -> None:
    rng = random.Random(7)
    keys = [f"key-{rng.randrange(1000)}".encode() for _ in range(500)]
    groups = route_rows("out", pa.array(keys, pa.binary()), None, 500, lambda t: 6, {})
    placed = _where(groups)
    assert sorted(placed) == list(range(500))
    for row, (topic, partition) in placed.items():
        assert topic == "out"
        assert partition == _murmur_partition(keys[row], 6)
    for group in groups:
        assert np.all(np.diff(group.rows) > 0)
        assert group.count == len(group.rows)
    assert [g.partition for g in groups] == sorted(g.partition for g in groups)


def test_string_keys_hash_as_their_utf8_bytes() -> None:
    keys = ["é€", "abc", "21"]
    placed = _where(route_rows("t", pa.array(keys), None, 3, lambda t: 5, {}))
    assert [placed[i][1] for i in range(3)] == [_murmur_partition(k.encode(), 5) for k in keys]


def test_an_explicit_partition_wins_over_the_key() -> None:
    keys = pa.array([b"a", b"b", b"c", None], pa.binary())
    partitions = pa.array([3, None, 0, 2], pa.int32())
    placed = _where(route_rows("t", keys, partitions, 4, lambda t: 4, {}))
    assert placed[0] == ("t", 3)
    assert placed[1] == ("t", _murmur_partition(b"b", 4))
    assert placed[2] == ("t", 0)
    assert placed[3] == ("t", 2)


def test_a_topic_column_routes_each_topic_with_its_own_partition_count() -> None:
    topics = pa.array(["b", "a", "b", "a", "c"])
    keys = pa.array([b"k1", b"k2", b"k3", b"k4", b"k5"], pa.binary())
    counts = {"a": 2, "b": 7, "c": 1}
    asked: list[str] = []

    def count(topic: str) -> int:
        asked.append(topic)
        return counts[topic]

    groups = route_rows(topics, keys, None, 5, count, {})
    assert sorted(asked) == ["a", "b", "c"]
    placed = _where(groups)
    for row, (topic, partition) in placed.items():
        assert topic == topics[row].as_py()
        assert partition == _murmur_partition(keys[row].as_py(), counts[topic])
    assert [g.topic for g in groups][0] == "b"  # topics in the order of their first row
    assert len({g.topic for g in groups}) == 3


def test_rows_without_key_or_partition_stick_to_one_partition_per_call() -> None:
    sticky: dict[str, StickyPartition] = {}
    first = route_rows("t", None, None, 100, lambda t: 8, sticky)
    assert len(first) == 1 and first[0].count == 100
    chosen = {first[0].partition}
    second = route_rows("t", pa.array([None] * 10, pa.binary()), None, 10, lambda t: 8, sticky)
    assert len(second) == 1
    chosen.add(second[0].partition)
    assert len(chosen) == 2  # the next chunk moves on, as a full sticky batch does


def test_null_topic_and_out_of_range_partition_are_refused() -> None:
    with pytest.raises(SchemaMismatchError, match="'topic' is null"):
        route_rows(pa.array(["a", None]), None, None, 2, lambda t: 1, {})
    with pytest.raises(ValueError, match="invalid partition 4"):
        route_rows("t", None, pa.array([0, 4], pa.int32()), 2, lambda t: 3, {})


def test_an_empty_chunk_has_no_groups() -> None:
    assert route_rows("t", pa.array([], pa.binary()), None, 0, lambda t: 3, {}) == []


def test_a_chunk_for_one_partition_is_one_group_of_every_row_in_order() -> None:
    sticky: dict[str, StickyPartition] = {}
    groups = route_rows("t", None, pa.array([5] * 4, pa.int32()), 4, lambda _: 8, sticky)
    assert [(g.topic, g.partition, g.rows.tolist()) for g in groups] == [("t", 5, [0, 1, 2, 3])]
