"""Which rows of a chunk go to which (topic, partition), column-wise, keeping row order.

:func:`route_rows` is the producer's partition choice for a whole chunk at once (the rules of
:mod:`unaligned.kafka.produce.partitioner`: an explicit partition wins, else the key's murmur2
partition, else the topic's sticky partition), followed by a stable grouping of the rows per
(topic, partition). Guarantees:

- every row of the chunk is in exactly one :class:`PartitionRows`;
- the rows of a group are in increasing row order (so the records of one partition are sent
  in input order);
- groups come in the order of their topic's first row, then by partition number;
- rows with neither key nor partition of one call go to one partition per topic (KIP-480's
  sticky partition); the next call picks another one (:meth:`StickyPartition.next_batch`).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from unaligned._util.arrow import row_indices
from unaligned.errors import SchemaMismatchError
from unaligned.kafka.produce.partitioner import StickyPartition, assign_partitions


@dataclass(frozen=True)
class PartitionRows:
    """The rows (increasing indices into the chunk) that go to ``partition`` of ``topic``."""

    topic: str
    partition: int
    rows: np.ndarray  # int64

    @property
    def count(self) -> int:
        return len(self.rows)


def _array(column: Any) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column if isinstance(column, pa.Array) else pa.array(column)


def _topics_of(topics: str | Any, rows: int) -> list[tuple[str, np.ndarray | None]]:
    """(topic, its rows) in the order of each topic's first row; ``None`` rows: all of them."""
    if isinstance(topics, str):
        return [(topics, None)]
    column = _array(topics)
    if len(column) != rows:
        raise ValueError(f"topic column has {len(column)} rows, expected {rows}")
    if column.null_count:
        raise SchemaMismatchError(
            "Kafka sink input column 'topic' is null in a row and option 'topic' is not set"
        )
    encoded = pc.dictionary_encode(column)
    names = encoded.dictionary.to_pylist()
    if len(names) == 1:
        return [(str(names[0]), None)]
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    return [(str(name), np.flatnonzero(codes == code)) for code, name in enumerate(names)]


def route_rows(
    topics: str | Any,
    keys: Any,
    partitions: Any,
    rows: int,
    partition_count: Callable[[str], int],
    sticky: MutableMapping[str, StickyPartition],
) -> list[PartitionRows]:
    """Group the ``rows`` rows of a chunk per (topic, partition); see the module docstring.

    ``topics``: one topic name for every row, or a string column (a null raises
    :class:`SchemaMismatchError`); ``keys``: a binary/string column or ``None``; ``partitions``:
    an int column (nulls: the partitioner) or ``None``; ``partition_count(topic)``: the topic's
    number of partitions; ``sticky``: the sticky partition of each topic, kept by the caller
    across chunks (missing topics are added). A partition outside ``[0, partition_count)``
    raises ``ValueError``.
    """
    if rows == 0:
        return []
    key_column = None if keys is None else _array(keys)
    partition_column = None if partitions is None else _array(partitions)
    groups: list[PartitionRows] = []
    for topic, topic_rows in _topics_of(topics, rows):
        count = partition_count(topic)
        if topic not in sticky:
            sticky[topic] = StickyPartition(count)
        take = None if topic_rows is None else row_indices(topic_rows)
        topic_keys = key_column if take is None or key_column is None else key_column.take(take)
        topic_partitions = (
            partition_column
            if take is None or partition_column is None
            else partition_column.take(take)
        )
        if topic_keys is None and topic_partitions is None:
            chosen = np.full(rows if topic_rows is None else len(topic_rows), -1, np.int32)
            chosen[:] = sticky[topic].current % count
        else:
            chosen = assign_partitions(
                topic_keys, count, partitions=topic_partitions, sticky=sticky[topic].current % count
            )
        unkeyed = topic_keys is None or topic_keys.null_count > 0
        all_rows = np.arange(rows, dtype=np.int64) if topic_rows is None else topic_rows
        if len(chosen) and int(chosen.min()) == int(chosen.max()):  # one partition: no sort
            groups.append(PartitionRows(topic, int(chosen[0]), all_rows))
            if unkeyed:
                sticky[topic].next_batch()
            continue
        order = np.argsort(chosen, kind="stable")
        ordered = chosen[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ordered)], strict=True):
            groups.append(PartitionRows(topic, int(ordered[lo]), all_rows[order[lo:hi]]))
        if unkeyed:
            sticky[topic].next_batch()
    return groups
