"""Kafka's murmur2 partitioning (partitioner.py) against Kafka's own test vectors and
kafka-python's DefaultPartitioner hash."""

from __future__ import annotations

import os
import random

import numpy as np
import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from unaligned.kafka.produce.partitioner import (
    StickyPartition,
    assign_partitions,
    murmur2,
    murmur2_column,
    to_positive,
)

# Kafka's UtilsTest.testMurmur2 (Java's signed int results)
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize("key", list(KAFKA_VECTORS), ids=lambda k: k.decode()[:12])
def test_murmur2_equals_kafkas_vectors_and_kafka_python(key: bytes) -> None:
    expected = KAFKA_VECTORS[key]
    assert murmur2(key) == expected
    assert signed(kafka_python_murmur2(key)) == expected
    hashes, valid = murmur2_column(pa.array([key], pa.binary()))
    assert hashes.tolist() == [expected] and valid.tolist() == [True]


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_column_hash_equals_kafka_python_on_random_keys(kind: pa.DataType) -> None:
    rng = random.Random(3)
    keys = [
        os.urandom(rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64, 200])) for _ in range(4000)
    ]
    column = pa.array([b"padding"] + keys, kind).slice(1)  # a sliced column: nonzero offset
    hashes, valid = murmur2_column(column)
    assert valid.all()
    assert hashes.tolist() == [signed(kafka_python_murmur2(k)) for k in keys]
    assert [murmur2(k) for k in keys[:500]] == hashes[:500].tolist()
    partitions = assign_partitions(column, 12)
    assert partitions.tolist() == [(kafka_python_murmur2(k) & 0x7FFFFFFF) % 12 for k in keys]


def test_string_keys_hash_their_utf8_bytes() -> None:
    keys = ["", "héllo", "ключ", "21"]
    hashes, _ = murmur2_column(pa.array(keys, pa.string()))
    assert hashes.tolist() == [murmur2(k.encode()) for k in keys]


def test_to_positive_masks_the_sign_bit() -> None:
    assert to_positive(np.array([-1, 0, -(2**31), 5], np.int32)).tolist() == [2**31 - 1, 0, 0, 5]
    assert (to_positive(np.array([KAFKA_VECTORS[b"foobar"]], np.int32)) % 50).tolist() == [16]


def test_partition_column_wins_and_null_keys_are_sticky() -> None:
    keys = pa.array([b"foobar", None, b"abc", None, b"21"], pa.binary())
    given = pa.array([None, None, 7, 2, None], pa.int32())
    result = assign_partitions(keys, 10, partitions=given, sticky=4)
    foobar = (KAFKA_VECTORS[b"foobar"] & 0x7FFFFFFF) % 10
    twenty_one = (KAFKA_VECTORS[b"21"] & 0x7FFFFFFF) % 10
    assert result.tolist() == [foobar, 4, 7, 2, twenty_one]
    assert result.dtype == np.int32


def test_without_keys_every_row_takes_the_sticky_partition() -> None:
    sticky = StickyPartition(6, random.Random(1))
    first = assign_partitions(None, 6, partitions=pa.nulls(5, pa.int32()), sticky=sticky)
    assert len(set(first.tolist())) == 1
    before = sticky.current
    after = sticky.next_batch()
    assert after != before and 0 <= after < 6
    assert assign_partitions(pa.nulls(3, pa.binary()), 6, sticky=sticky).tolist() == [after] * 3
    assert StickyPartition(1).next_batch() == 0


def test_an_explicit_partition_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="invalid partition 10"):
        assign_partitions(pa.array([b"a"]), 10, partitions=pa.array([10], pa.int32()))
    with pytest.raises(ValueError, match="at least one partition"):
        assign_partitions(pa.array([b"a"]), 0)


def test_a_partition_on_every_row_wins_without_hashing_and_is_checked() -> None:
    keys = pa.array([b"a", None, b"c"], pa.binary())
    given = pa.chunked_array([pa.array([2, 0], pa.int64()), pa.array([1], pa.int64())])
    result = assign_partitions(keys, 3, partitions=given)
    assert result.tolist() == [2, 0, 1] and result.dtype == np.int32
    with pytest.raises(ValueError, match="invalid partition -1"):
        assign_partitions(keys, 3, partitions=pa.array([0, -1, 1], pa.int32()))
    with pytest.raises(ValueError, match="partition column has 2 rows"):
        assign_partitions(keys, 3, partitions=pa.array([0, 1], pa.int32()))
