"""Barrier parsing from real Spark 4.3 checkpoints, and the batch-start deadline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from unaligned._fs import resolve_location
from unaligned.barriers.barrier import Barrier, Deadline, read_barrier
from unaligned.barriers.offset_log import (
    LoggedOffset,
    parse_offset_log,
    read_offset_log,
    read_query_id,
    source_offsets,
)
from unaligned.errors import BarrierError, OptionError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "spark_checkpoints"


class FakeClock:
    def __init__(self, now_ms: float) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms


# --- offset log -----------------------------------------------------------------------------------


def test_v1_offset_log_with_two_sources() -> None:
    entry = read_offset_log(str(FIXTURES / "v1_two_sources"), 2)
    assert entry.version == 1
    assert entry.batch_timestamp_ms == 1795372420083
    assert entry.batch_watermark_ms == 0
    assert entry.conf["spark.sql.shuffle.partitions"] == "1"
    assert entry.sources == (
        LoggedOffset("0", 8),
        LoggedOffset("1", {"offset": 9, "timestamp": 3000}),
    )


def test_v2_offset_log_with_named_sources() -> None:
    entry = read_offset_log(str(FIXTURES / "v2_named_sources"), 3)
    assert entry.version == 2
    assert entry.batch_timestamp_ms == 1795372479771
    assert {s.source_id: s.offset for s in entry.sources} == {
        "rates": 11,
        "micro_rates": {"offset": 12, "timestamp": 4000},
    }


def test_v2_offset_log_with_one_unnamed_source() -> None:
    entry = read_offset_log(str(FIXTURES / "v2_one_source"), 1)
    assert entry.version == 2
    assert entry.batch_timestamp_ms == 1795372375234
    assert entry.sources == (LoggedOffset("0", 4),)


def test_read_barrier_takes_start_from_offset_log_and_id_from_metadata() -> None:
    barrier = read_barrier(str(FIXTURES / "v1_two_sources"), 1)
    assert barrier == Barrier(
        batch_id=1, start_ms=1795372419292, query_id="b1f8447a-30e0-4cfc-b643-ec69054872ac"
    )
    assert read_query_id(str(FIXTURES / "v2_named_sources")) == (
        "bce773fc-8a8a-4f10-95e6-19cbd6734801"
    )


def test_read_barrier_accepts_file_uri_and_a_passed_filesystem() -> None:
    checkpoint = FIXTURES / "v2_one_source"
    by_uri = read_barrier(f"file:{checkpoint}", 1)
    by_fs = read_barrier(str(checkpoint), 1, filesystem=pafs.LocalFileSystem())
    assert by_uri == by_fs
    assert by_uri.start_ms == 1795372375234


def test_missing_offsets_file_names_the_file_and_batch(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "v1_two_sources", tmp_path / "cp")
    with pytest.raises(BarrierError, match=r"offsets/7 for batch 7 does not exist"):
        read_barrier(str(tmp_path / "cp"), 7)


def test_missing_query_metadata(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "v1_two_sources", tmp_path / "cp")
    (tmp_path / "cp" / "metadata").unlink()
    with pytest.raises(BarrierError, match=r"query metadata .*metadata does not exist"):
        read_barrier(str(tmp_path / "cp"), 2)
    (tmp_path / "cp" / "metadata").write_text('{"runId": "x"}')
    with pytest.raises(BarrierError, match="has no JSON 'id'"):
        read_barrier(str(tmp_path / "cp"), 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"incomplete \(0 line"),
        ("v1", "incomplete"),
        ("v3\n{}\n1", "version v3 is not supported"),
        ("1\n{}\n1", "is not a version"),
        ("v1\n\n1", "no batch metadata line"),
        ("v1\n{not json\n1", "metadata line is not JSON"),
        ('v1\n{"batchWatermarkMs":0}\n1', "no integer batchTimestampMs"),
        ('v1\n{"batchTimestampMs":5}\n{oops', "offset of source '0' is not JSON"),
        ('v2\n{"batchTimestampMs":5}\nno-colon', "is not '<id>:<offset>'"),
    ],
)
def test_malformed_offset_log(text: str, message: str) -> None:
    with pytest.raises(BarrierError, match=message) as info:
        parse_offset_log(text, name="cp/offsets/4")
    assert "cp/offsets/4" in str(info.value)


def test_void_offset_crlf_and_trailing_newline() -> None:
    text = 'v1\r\n{"batchTimestampMs":12,"conf":{}}\r\n-\r\n{"t":{"0":5}}\n'
    entry = parse_offset_log(text)
    assert entry.batch_timestamp_ms == 12
    assert entry.sources == (LoggedOffset("0", None), LoggedOffset("1", {"t": {"0": 5}}))


def test_source_offsets_from_lines() -> None:
    lines = (FIXTURES / "v2_named_sources" / "offsets" / "2").read_text().split("\n")
    assert source_offsets(lines) == (
        LoggedOffset("rates", 10),
        LoggedOffset("micro_rates", {"offset": 9, "timestamp": 3000}),
    )
    assert source_offsets(["v2", "{}", "kafka:-"]) == (LoggedOffset("kafka", None),)


def test_resolve_location_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = resolve_location("cp")
    assert relative.path == str(tmp_path / "cp")
    assert isinstance(relative.filesystem, pafs.LocalFileSystem)
    for uri in (f"file:{tmp_path}/cp", f"file://{tmp_path}/cp"):
        assert resolve_location(uri).path == str(tmp_path / "cp")
    child = resolve_location(f"file://{tmp_path}/cp").child("a", "b")
    assert child.uri == f"file://{tmp_path}/cp/a/b"
    assert resolve_location(child.uri).path == child.path
    with pytest.raises(OptionError, match="nosuchscheme://x"):
        resolve_location("nosuchscheme://x")


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
