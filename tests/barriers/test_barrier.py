"""Barrier parsing from real Spark 4.3 checkpoints, and the batch-start deadline."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from unaligned.barriers.barrier import Barrier, Deadline, read_barrier
from unaligned.checkpoint import Checkpoint
from unaligned.errors import OptionError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "spark_checkpoints"


class FakeClock:
    def __init__(self, now_ms: float) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms


# --- barrier ---------------------------------------------------------------------------------


def test_read_barrier_takes_start_from_offset_log_and_id_from_metadata() -> None:
    barrier = read_barrier(Checkpoint.resolve(str(FIXTURES / "v1_two_sources")), 1)
    assert barrier == Barrier(
        batch_id=1,
        start_ms=1795372419292,
        query_id="b1f8447a-30e0-4cfc-b643-ec69054872ac",
        idle_barriers=False,  # rate sources: no barrierToken, so no idle barriers
    )
    assert Checkpoint.resolve(str(FIXTURES / "v2_named_sources")).query_id() == (
        "bce773fc-8a8a-4f10-95e6-19cbd6734801"
    )


def test_a_barrier_has_idle_barriers_only_with_an_unaligned_source(tmp_path: Path) -> None:
    """Issue 8 scenario 4: only a source whose offset carries a barrierToken emits idle
    barriers, so only then may the sink cut."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "metadata").write_text('{"id":"q"}')
    head = '{"batchWatermarkMs":0,"batchTimestampMs":5,"conf":{}}'
    unaligned = '{"offsets":{"t":{"0":1}},"idleBarrier":0,"barrierToken":"abc"}'
    for batch, sources in enumerate([["3", "-"], ["3", unaligned]]):
        (tmp_path / "offsets" / str(batch)).write_text("\n".join(["v1", head, *sources]))
    assert not read_barrier(Checkpoint.resolve(str(tmp_path)), 0).idle_barriers
    assert read_barrier(Checkpoint.resolve(str(tmp_path)), 1).idle_barriers


def test_read_barrier_accepts_file_uri_and_a_passed_filesystem() -> None:
    checkpoint = FIXTURES / "v2_one_source"
    by_uri = read_barrier(Checkpoint.resolve(f"file:{checkpoint}"), 1)
    by_fs = read_barrier(Checkpoint.resolve(str(checkpoint), pafs.LocalFileSystem()), 1)
    assert by_uri == by_fs
    assert by_uri.start_ms == 1795372375234


# --- deadline -------------------------------------------------------------------------------------


def test_deadline_is_measured_from_batch_start_not_task_start() -> None:
    # FLINK-23041: a task starting late gets what is left of the batch's timeout, not a new one.
    clock = FakeClock(1_000_000 + 9_900)  # the task starts 9.9 s after the batch started
    deadline = Barrier(batch_id=3, start_ms=1_000_000, query_id="q").deadline(10_000, clock)
    assert deadline.deadline_ms == 1_010_000
    assert not deadline.expired()
    assert deadline.remaining_s() == pytest.approx(0.1)
    assert deadline.elapsed_ms() == pytest.approx(9_900)
    clock.now_ms = 1_010_000
    assert deadline.expired()
    assert deadline.remaining_s() == 0.0
    clock.now_ms = 1_020_000
    assert deadline.expired()
    assert deadline.remaining_s() == 0.0


def test_rerun_batch_deadline_measured_from_not_before() -> None:
    # a batch re-run after a restart keeps its old batchTimestampMs (checked on Spark 4.3)
    barrier = Barrier(batch_id=3, start_ms=1_000_000, query_id="q")
    clock = FakeClock(5_000_000)
    assert barrier.deadline(10_000, clock).expired()
    rerun = barrier.deadline(10_000, clock, not_before_ms=4_999_000)
    assert rerun.start_ms == 4_999_000 and not rerun.expired()
    assert rerun.remaining_s() == pytest.approx(9.0)
    # an earlier not_before_ms never moves the start back
    assert barrier.deadline(10_000, clock, not_before_ms=0).start_ms == 1_000_000


def test_deadline_with_zero_timeout_is_expired_at_start() -> None:
    deadline = Deadline(500, 0, FakeClock(500))
    assert deadline.expired()


def test_deadline_clock_behind_the_driver() -> None:
    deadline = Deadline(10_000, 1_000, FakeClock(9_000))
    assert deadline.elapsed_ms() == -1_000
    assert deadline.remaining_s() == pytest.approx(2.0)
    assert not deadline.expired()


def test_deadline_rejects_negative_timeout() -> None:
    with pytest.raises(OptionError, match="alignedCheckpointTimeout"):
        Deadline(0, -1)


def test_default_clock_is_wall_clock_ms() -> None:
    import time

    deadline = Deadline(int(time.time() * 1000), 60_000)
    assert not deadline.expired()
    assert 50 < deadline.remaining_s() <= 60


def test_a_layout_drain_cuts_nothing_and_reads_nothing_only_when_every_source_drains() -> None:
    from unaligned.barriers.barrier import layout_drain, reads_nothing

    drain = {"offsets": {}, "idleBarrier": 1, "barrierToken": "t", "layoutDrain": True}
    other = {"offsets": {}, "idleBarrier": 0, "barrierToken": "u"}
    foreign = {"logOffset": 3}
    assert layout_drain([drain]) and reads_nothing([drain]) and reads_nothing([drain, None])
    assert layout_drain([drain, other]) and not reads_nothing([drain, other])
    assert not reads_nothing([drain, foreign])  # a source not ours may bring rows
    assert not layout_drain([other, foreign]) and not reads_nothing([None])
    assert not layout_drain([{"offsets": {}, "layoutDrain": True}])  # no token: not ours
