"""The Java producer's partitioning, column-wise: a row's partition without a Python loop per row.

- A non-null ``partition`` value wins (checked against the topic's partition count).
- A keyed row goes to ``toPositive(murmur2(key)) % numPartitions``: Kafka's
  ``BuiltInPartitioner.partitionForKey`` with ``Utils.murmur2`` (MurmurHash2, seed
  ``0x9747b28c``, little-endian 4-byte blocks) and ``toPositive(h) = h & 0x7fffffff``. It equals
  kafka-python's ``DefaultPartitioner`` (``kafka.partitioner.default.murmur2``).
- A row with neither goes to the sticky partition (KIP-480/KIP-794): one partition for all such
  rows of a batch, picked at random and changed by :meth:`StickyPartition.next_batch`.

:func:`murmur2_column` hashes every key of a binary column at once with numpy (uint32 arithmetic
wraps, as Java's int does): one vectorised step per 4-byte block of the longest key.
:func:`murmur2` is the same hash for one key in plain Python.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa

from unaligned._util.arrow import integers, valid_rows
from unaligned.errors import SchemaMismatchError

SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int (Java's return value)."""
    length = len(data)
    h = (SEED ^ length) & _MASK32
    blocks = length // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = data[4 * blocks :]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _signed(h)


def _binary_parts(column: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths, data, valid) of a binary or string Arrow column."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not isinstance(arr, pa.Array):
        arr = pa.array(arr, pa.binary())
    kind = arr.type
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        offset_type: Any = np.int32
    elif pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        offset_type = np.int64
    else:
        raise SchemaMismatchError(f"Kafka record keys must be binary or string, not {kind}")
    rows = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    item = np.dtype(offset_type).itemsize
    offsets = np.frombuffer(offsets_buf, offset_type, rows + 1, arr.offset * item).astype(np.int64)
    data = (
        np.frombuffer(data_buf, np.uint8)
        if data_buf is not None and data_buf.size
        else np.zeros(0, np.uint8)
    )
    return offsets[:-1], np.diff(offsets), data, valid_rows(arr)


def murmur2_column(keys: Any) -> tuple[np.ndarray, np.ndarray]:
    """Kafka's murmur2 of every key of a binary/string column: (int32 hashes, valid), where
    ``valid`` is false for null keys (whose hash is meaningless)."""
    starts, lengths, data, valid = _binary_parts(keys)
    m = np.uint32(_M)
    h = np.uint32(SEED) ^ lengths.astype(np.uint32)
    blocks = lengths // 4
    data32 = data.astype(np.uint32)
    if len(lengths):
        for j in range(int(blocks.max())):
            rows = np.flatnonzero(blocks > j)
            at = starts[rows] + 4 * j
            k = (
                data32[at]
                | (data32[at + 1] << np.uint32(8))
                | (data32[at + 2] << np.uint32(16))
                | (data32[at + 3] << np.uint32(24))
            )
            k *= m
            k ^= k >> np.uint32(24)
            k *= m
            h[rows] = (h[rows] * m) ^ k
    extra = lengths % 4
    tail = starts + (lengths - extra)
    for byte, shift in ((2, 16), (1, 8), (0, 0)):
        rows = np.flatnonzero(extra > byte)
        h[rows] ^= data32[tail[rows] + byte] << np.uint32(shift)
    rows = np.flatnonzero(extra > 0)
    h[rows] *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h.view(np.int32), valid


def to_positive(hashes: np.ndarray) -> np.ndarray:
    """Kafka's ``Utils.toPositive``: ``h & 0x7fffffff``."""
    positive: np.ndarray = hashes.astype(np.int64) & 0x7FFFFFFF
    return positive


class StickyPartition:
    """The partition of rows that have neither key nor partition: one per batch (KIP-480)."""

    def __init__(self, num_partitions: int, rng: random.Random | None = None) -> None:
        if num_partitions <= 0:
            raise ValueError(f"a topic has at least one partition, not {num_partitions}")
        self._num = num_partitions
        self._rng = rng or random.Random()
        self.current = self._rng.randrange(num_partitions)

    def next_batch(self) -> int:
        """Switch to another partition (a different one when there are several), as the Java
        producer does when a sticky batch is full."""
        if self._num > 1:
            step = self._rng.randrange(1, self._num)
            self.current = (self.current + step) % self._num
        return self.current


def assign_partitions(
    keys: Any,
    num_partitions: int,
    *,
    partitions: Any = None,
    sticky: StickyPartition | int | None = None,
) -> np.ndarray:
    """The partition (int32) of every row: ``partitions`` where not null, else the key's murmur2
    partition, else the sticky partition (an ``int``, a :class:`StickyPartition`'s current one,
    or a new random one). ``keys=None``: every key is null."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    named = _all_named(partitions, None if keys is None else len(keys))
    if named is not None:  # every row names its partition: no key is hashed
        _check_partitions(named, np.ones(len(named), bool), num_partitions)
        named_partitions: np.ndarray = named.astype(np.int32)
        return named_partitions
    if keys is not None:
        hashes, keyed = murmur2_column(keys)
        rows = len(hashes)
        result = (to_positive(hashes) % num_partitions).astype(np.int32)
    else:
        rows = len(partitions) if partitions is not None else 0
        keyed = np.zeros(rows, bool)
        result = np.zeros(rows, np.int32)
    if not keyed.all():
        if sticky is None:
            sticky = StickyPartition(num_partitions)
        chosen = sticky.current if isinstance(sticky, StickyPartition) else int(sticky)
        result[~keyed] = chosen
    if partitions is not None:
        given = (
            partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
        )
        if not isinstance(given, pa.Array):
            given = pa.array(given, pa.int32())
        if len(given) != rows:
            raise ValueError(f"partition column has {len(given)} rows, expected {rows}")
        if given.null_count < len(given):
            explicit = valid_rows(given)
            values = np.where(explicit, integers(given), 0).astype(np.int64)
            _check_partitions(values, explicit, num_partitions)
            result[explicit] = values[explicit]
    return result


def _all_named(partitions: Any, rows: int | None) -> np.ndarray | None:
    """The ``partitions`` column as int64 if it has no null (and ``rows`` rows), else ``None``."""
    if not isinstance(partitions, (pa.Array, pa.ChunkedArray)) or partitions.null_count:
        return None
    if rows is not None and len(partitions) != rows:
        return None  # the caller's checks name the mismatch
    given = partitions.combine_chunks() if isinstance(partitions, pa.ChunkedArray) else partitions
    values: np.ndarray = integers(given).astype(np.int64, copy=False)
    return values


def _check_partitions(values: np.ndarray, explicit: np.ndarray, num_partitions: int) -> None:
    """Raise ``ValueError`` naming the first explicit partition outside the topic."""
    if len(values) and int(values.min()) >= 0 and int(values.max()) < num_partitions:
        return
    bad = explicit & ((values < 0) | (values >= num_partitions))
    if bad.any():
        raise ValueError(
            f"invalid partition {int(values[np.argmax(bad)])}: the topic has partitions "
            f"0 to {num_partitions - 1}"
        )
