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
    # 9.9 s left: a quarter of it at 1,000 rows/s is 2,475 rows, but at most twice 100
    assert sizer.next_rows(10_000) == 200
    sizer.record(200, 0.2)
    sizer.record(400, 0.4)
    sizer.record(800, 0.8)
    sizer.record(1_600, 1.6)  # 3,100 rows in 3.1 s, the largest 1,600
    clock.ms = 3_100  # 6.9 s left: a quarter at 1,000 rows/s is 1,725 rows
    assert sizer.next_rows(10_000) == 1_725
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
    slow.record(100, 2.0)
    slow.record(200, 4.0)  # 50 rows/s: 30 s hold 375 rows a quarter
    assert slow.next_rows(10_000) == 375
    fast = sizer_with(30_000, clock)
    rows = []
    while not rows or rows[-1] < 10_000:
        rows.append(fast.next_rows(10_000))
        fast.record(rows[-1], 0.0)  # too quick for the timer
    assert rows == [100, 200, 400, 800, 1_600, 3_200, 6_400, 10_000]


def test_a_fast_first_chunk_does_not_plan_the_rest_of_the_batch_as_one_chunk() -> None:
    """A broker quota throttles the request after the one that broke it: the first chunk
    flatters the rate, the second shows the slowdown, and the task still gets to cut."""
    clock = FakeClock()
    deadline = Deadline(0, 1_000, clock)
    sizer = ChunkSizer(100, deadline, lambda: clock.ms / 1000)
    left, chunks = 400, []
    while left and not deadline.expired():
        chunks.append(sizer.next_rows(left))
        # the producer's buffer takes the first chunk at once (5,000 rows/s); from then on
        # the quota lets 200 rows/s through
        seconds = 0.02 if len(chunks) == 1 else chunks[-1] / 200
        clock.ms += seconds * 1000
        sizer.record(chunks[-1], seconds)
        left -= chunks[-1]
    assert chunks == [100, 200]  # not [100, 300]: 0.98 s at 5,000 rows/s would hold 300
    assert left == 100  # cut: these go to the channel state
