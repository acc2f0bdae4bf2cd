"""targetBatchDuration: the cap follows measured throughput toward the target."""

from __future__ import annotations

from unaligned.source.planning.batch_sizing import (
    FIRST_BATCH_ROWS_PER_PARTITION,
    MAX_GROWTH,
    BatchSizer,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_first_batch_is_small_then_the_cap_follows_the_measured_throughput() -> None:
    clock = Clock()
    sizer = BatchSizer(target_ms=2000, clock=clock)
    cap = sizer.cap(partitions_with_backlog=4)
    assert cap == 4 * FIRST_BATCH_ROWS_PER_PARTITION
    sizer.planned(cap, cap)
    # A slow query: 1,000 rows/s whatever the batch size. The cap converges to 2 s of rows.
    caps = []
    for _ in range(12):
        clock.now += sizer._last_planned_rows / 1000.0
        cap = sizer.cap(4)
        sizer.planned(cap, cap)
        caps.append(cap)
    assert abs(caps[-1] - 2000) <= 20, caps


def test_growth_per_batch_is_bounded_and_idle_batches_are_not_measurements() -> None:
    clock = Clock()
    sizer = BatchSizer(target_ms=10_000, clock=clock)
    first = sizer.cap(1)
    sizer.planned(first, first)
    clock.now += 0.001  # absurdly fast batch
    second = sizer.cap(1)
    assert second == int(first * MAX_GROWTH)
    sizer.planned(0, second)  # idle: nothing planned
    clock.now += 100.0
    assert sizer.cap(1) == second  # no new measurement, same estimate; last cap unchanged


def test_cap_never_starves_a_partition_with_backlog() -> None:
    clock = Clock()
    sizer = BatchSizer(target_ms=1, clock=clock)
    sizer.planned(10, 10)
    clock.now += 1000.0  # 0.01 rows/s
    assert sizer.cap(partitions_with_backlog=3) == 3
