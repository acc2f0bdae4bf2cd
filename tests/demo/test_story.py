"""The demo's data set: skewed, distinct, of the size the story promises."""

from __future__ import annotations

import json

import pytest

from unaligned.demo.story import VALUE_BYTES, skewed_values


@pytest.mark.parametrize("records, partitions", [(4000, 4), (10, 3), (7, 1), (5, 6)])
def test_half_the_records_go_to_the_hot_partition_and_every_value_is_distinct(
    records: int, partitions: int
) -> None:
    values = skewed_values(records, partitions)
    assert sorted(values) == list(range(partitions))
    assert sum(len(v) for v in values.values()) == records
    assert len(values[0]) == (records // 2 if partitions > 1 else records)
    others = [len(values[p]) for p in range(1, partitions)]
    assert not others or max(others) - min(others) <= 1  # the rest spread evenly
    flat = [v for vs in values.values() for v in vs]
    assert len(set(flat)) == records
    assert all(len(v) == VALUE_BYTES for v in flat)
    first = json.loads(values[0][0])
    assert first == {"partition": 0, "seq": 0, "reading": 0.0}
