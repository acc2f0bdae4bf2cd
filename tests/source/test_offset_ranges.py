"""Offset ranges: splitting into read tasks (minPartitions, maxRecordsPerPartition) and read
limits (maxOffsetsPerTrigger, maxTriggerDelay)."""

from __future__ import annotations

import pytest

from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.planning.offset_ranges import (
    OffsetRange,
    available_records,
    group_ranges,
    min_rows_delay_passed,
    rate_limit,
    split_ranges,
)

A0, A1, A2, B0 = (
    TopicPartitionId("a", 0),
    TopicPartitionId("a", 1),
    TopicPartitionId("a", 2),
    TopicPartitionId("b", 0),
)


# --- ranges ---------------------------------------------------------------------------------


def test_offset_range_rejects_a_negative_size() -> None:
    with pytest.raises(ValueError):
        OffsetRange(A0, 5, 4)


def test_read_tasks_deal_the_partitions_round_robin_in_stable_order_including_empty() -> None:
    ranges = [OffsetRange(B0, 0, 10), OffsetRange(A1, 3, 3), OffsetRange(A0, 0, 5)]
    ranges.append(OffsetRange(A2, 1, 2))
    grouped = group_ranges(ranges, 2)
    assert grouped == [
        (OffsetRange(A0, 0, 5), OffsetRange(A2, 1, 2)),
        (OffsetRange(A1, 3, 3), OffsetRange(B0, 0, 10)),
    ]
    # the same partitions in the next batch (other offsets, any order): the same task each
    later = [OffsetRange(tp, 10, 20) for tp in (A2, B0, A0, A1)]
    assert [[r.tp for r in task] for task in group_ranges(later, 2)] == [[A0, A2], [A1, B0]]


def test_more_read_tasks_than_partitions_is_one_task_per_partition() -> None:
    ranges = [OffsetRange(A0, 0, 5), OffsetRange(A1, 0, 5)]
    assert group_ranges(ranges, 8) == [(OffsetRange(A0, 0, 5),), (OffsetRange(A1, 0, 5),)]
    assert group_ranges(ranges, None) == group_ranges(ranges, 8)
    assert group_ranges([], 4) == []


def test_splitting_options_make_one_task_per_piece() -> None:
    ranges = [OffsetRange(A0, 0, 10), OffsetRange(A1, 0, 2)]
    assert group_ranges(ranges, None, min_partitions=4) == [
        (piece,) for piece in split_ranges(ranges, min_partitions=4)
    ]
    assert len(group_ranges(ranges, None, min_partitions=4)) == 4


def test_split_without_options_is_one_range_per_partition_in_stable_order_including_empty() -> None:
    ranges = [OffsetRange(B0, 0, 10), OffsetRange(A1, 3, 3), OffsetRange(A0, 0, 5)]
    assert split_ranges(ranges) == [
        OffsetRange(A0, 0, 5),
        OffsetRange(A1, 3, 3),
        OffsetRange(B0, 0, 10),
    ]


def test_min_partitions_at_or_below_the_partition_count_does_not_split() -> None:
    ranges = [OffsetRange(A0, 0, 100), OffsetRange(A1, 0, 1)]
    assert split_ranges(ranges, min_partitions=2) == sorted(ranges)


def test_min_partitions_splits_large_ranges_proportionally_and_covers_every_offset() -> None:
    ranges = [OffsetRange(A0, 0, 900), OffsetRange(A1, 50, 150), OffsetRange(B0, 7, 7)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len(pieces) == 10
    by_tp: dict[TopicPartitionId, list[OffsetRange]] = {}
    for piece in pieces:
        by_tp.setdefault(piece.tp, []).append(piece)
    assert by_tp[B0] == [OffsetRange(B0, 7, 7)]  # the empty range keeps its task
    for rng in ranges:
        parts = by_tp[rng.tp]
        assert parts[0].start == rng.start and parts[-1].end == rng.end
        assert all(x.end == y.start for x, y in zip(parts, parts[1:], strict=False))
    assert len(by_tp[A0]) > len(by_tp[A1]) >= 1
    sizes = [p.size for p in by_tp[A0]]
    assert max(sizes) - min(sizes) <= 1


def test_min_partitions_never_makes_more_pieces_than_offsets() -> None:
    pieces = split_ranges([OffsetRange(A0, 0, 3), OffsetRange(A1, 0, 0)], min_partitions=50)
    assert [p.size for p in pieces if p.tp == A0] == [1, 1, 1]
    assert [p for p in pieces if p.tp == A1] == [OffsetRange(A1, 0, 0)]


def test_split_is_deterministic() -> None:
    ranges = [OffsetRange(TopicPartitionId("t", i), 0, 17 * (i + 1)) for i in range(5)]
    assert split_ranges(ranges, min_partitions=23) == split_ranges(
        list(reversed(ranges)), min_partitions=23
    )


def test_max_records_per_partition_bounds_every_piece() -> None:
    pieces = split_ranges(
        [OffsetRange(A0, 10, 1010), OffsetRange(A1, 0, 5)], max_records_per_partition=300
    )
    assert pieces and all(p.size <= 300 for p in pieces)
    assert sum(p.size for p in pieces if p.tp == A0) == 1000
    assert len([p for p in pieces if p.tp == A0]) == 4


# --- read limits ----------------------------------------------------------------------------


def test_available_records_counts_only_forward_progress() -> None:
    assert available_records({A0: 5, A1: 10}, {A0: 15, A1: 8}) == 10


def test_rate_limit_returns_latest_when_within_budget() -> None:
    assert rate_limit({A0: 0, A1: 0}, {A0: 3, A1: 4}, 10) == {A0: 3, A1: 4}


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 10, 99, 100])
def test_rate_limit_never_exceeds_the_limit_and_always_progresses(limit: int) -> None:
    start = {A0: 100, A1: 0, A2: 5, B0: 50}
    latest = {A0: 160, A1: 30, A2: 6, B0: 50}
    end = rate_limit(start, latest, limit)
    taken = sum(end[tp] - start[tp] for tp in start)
    assert taken == min(limit, available_records(start, latest))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_rate_limit_shares_the_budget_in_proportion_to_backlog() -> None:
    end = rate_limit({A0: 0, A1: 0}, {A0: 300, A1: 100}, 40)
    assert end == {A0: 30, A1: 10}


def test_rate_limit_keeps_a_latest_offset_below_the_start() -> None:
    end = rate_limit({A0: 50, A1: 0}, {A0: 10, A1: 100}, 10)
    assert end == {A0: 10, A1: 10}


def test_min_rows_delay() -> None:
    assert min_rows_delay_passed(now_ms=10_000, last_trigger_ms=0, max_trigger_delay_ms=10_000)
    assert not min_rows_delay_passed(now_ms=9_999, last_trigger_ms=0, max_trigger_delay_ms=10_000)
