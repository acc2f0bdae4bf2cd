"""How many rows a sink task writes between two looks at the deadline."""

from __future__ import annotations

from unaligned.barriers.barrier import Deadline
from unaligned.barriers.chunking import ChunkSizer


class FakeClock:
    def __init__(self) -> None:
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms


def sizer_with(timeout_ms: int, clock: FakeClock, min_rows: int = 100) -> ChunkSizer:
    return ChunkSizer(min_rows, Deadline(0, timeout_ms, clock), lambda: clock.ms / 1000)


def test_a_task_that_cannot_cut_writes_each_input_batch_whole() -> None:
    sizer = ChunkSizer(100, None)
    assert sizer.next_rows(10_000) == 10_000
    sizer.record(10_000, 5.0)  # however slow
    assert sizer.next_rows(7) == 7


def test_first_chunk_rows_then_a_quarter_of_the_time_left_at_the_rate_so_far() -> None:
    clock = FakeClock()
    sizer = sizer_with(10_000, clock)
    assert sizer.next_rows(10_000) == 100
    clock.ms = 100  # 100 rows in 0.1 s: 1,000 rows/s
    sizer.record(100, 0.1)
    # 9.9 s left: a quarter of it at 1,000 rows/s is 2,475 rows
    assert sizer.next_rows(10_000) == 2_475
    assert sizer.next_rows(500) == 500  # never more than the batch holds


def test_near_the_deadline_chunks_shrink_to_chunk_rows_never_below() -> None:
    clock = FakeClock()
    sizer = sizer_with(10_000, clock)
    sizer.record(1_000, 1.0)  # 1,000 rows/s
    clock.ms = 9_000  # 1 s left: a quarter is 250 rows
    assert sizer.next_rows(10_000) == 250
    clock.ms = 9_900  # 0.1 s left: 25 rows, below chunkRows
    assert sizer.next_rows(10_000) == 100
    clock.ms = 20_000  # past the deadline (the task cuts after this chunk)
    assert sizer.next_rows(10_000) == 100


def test_a_throttled_task_keeps_small_chunks_and_a_fast_one_writes_whole_batches() -> None:
    clock = FakeClock()
    slow = sizer_with(30_000, clock)
    slow.record(100, 2.0)  # 50 rows/s: 30 s hold 375 rows a quarter
    assert slow.next_rows(10_000) == 375
    fast = sizer_with(30_000, clock)
    fast.record(100, 0.0)  # too quick for the timer
    assert fast.next_rows(10_000) == 10_000
