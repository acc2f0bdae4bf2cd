"""The source's batch size behind a sink whose pending channel state grows."""

from __future__ import annotations

from unaligned.barriers.idle import PendingHint
from unaligned.source.planning.backlog_limit import MIN_ROWS_PER_PARTITION, BacklogLimit


def test_growing_state_halves_the_batch_and_a_shrinking_one_lets_it_grow_back() -> None:
    limit = BacklogLimit()
    assert limit.cap(None, 4) is None  # nothing pending: no cap
    limit.planned(10_000)
    assert limit.cap(PendingHint(1, 500), 4) == 5_000  # grew from 0
    assert limit.cap(PendingHint(1, 500), 4) == 5_000  # the same barrier: unchanged
    limit.planned(5_000)
    assert limit.cap(PendingHint(2, 900), 4) == 2_500  # grew again
    limit.planned(2_500)
    assert limit.cap(PendingHint(3, 400), 4) == 5_000  # shrank: doubled
    assert limit.cap(None, 4) is None  # drained


def test_the_cap_never_goes_below_a_floor_per_partition_with_backlog() -> None:
    limit = BacklogLimit()
    limit.planned(10)
    assert limit.cap(PendingHint(1, 5), 3) == 3 * MIN_ROWS_PER_PARTITION


def test_an_idle_batch_is_not_the_size_to_halve() -> None:
    limit = BacklogLimit()
    limit.planned(8_000)
    limit.planned(0)  # an idle barrier planned no rows
    assert limit.cap(PendingHint(1, 10), 1) == 4_000
