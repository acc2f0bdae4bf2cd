"""Per-barrier sink metrics: aggregation of task stats, storage under the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from unaligned.barriers.metrics import (
    BarrierMetrics,
    TaskBarrierStats,
    aggregate,
    metrics_jsonl,
    purge_metrics,
    read_metrics,
    write_metrics,
)
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError

BATCH_START = 1_000_000


def task(index: int, start_ms: int, **counts) -> TaskBarrierStats:
    counts.setdefault("rows_written", 0)
    return TaskBarrierStats(
        task_index=index, start_ms=start_ms, cut=counts.pop("cut", False), **counts
    )


def unaligned_batch(batch_id: int = 5) -> BarrierMetrics:
    tasks = [
        task(0, BATCH_START + 40, rows_written=1000, rows_replayed=100),
        task(
            1,
            BATCH_START + 25,
            cut=True,
            rows_written=300,
            rows_spilled=700,
            state_file_bytes=80_000,
        ),
        task(
            2,
            BATCH_START + 90,
            cut=True,
            rows_written=10,
            rows_replayed=10,
            rows_carried=5,
            rows_spilled=20,
            state_inline_bytes=3_000,
        ),
    ]
    return aggregate(batch_id, BATCH_START, BATCH_START + 12_500, tasks)


def test_aggregate_unaligned_batch() -> None:
    metrics = unaligned_batch()
    assert metrics == BarrierMetrics(
        batch_id=5,
        start_delay_ms=25,
        duration_ms=12_500,
        mode="unaligned",
        tasks=3,
        tasks_cut=2,
        rows_written=1310,
        rows_replayed=110,
        rows_carried=5,
        rows_spilled=720,
        bytes_spilled=83_000,
        channel_state_files=1,
        channel_state_bytes=80_000,
        inlined_bytes=3_000,
    )


def test_aggregate_aligned_batch_and_empty_batch() -> None:
    tasks = [task(0, BATCH_START + 5, rows_written=10), task(1, BATCH_START + 7, rows_written=2)]
    aligned = aggregate(6, BATCH_START, BATCH_START + 100, tasks)
    assert (aligned.mode, aligned.tasks_cut, aligned.rows_written) == ("aligned", 0, 12)
    assert (aligned.channel_state_files, aligned.bytes_spilled) == (0, 0)
    empty = aggregate(7, BATCH_START, BATCH_START + 3, [])
    assert (empty.mode, empty.tasks, empty.start_delay_ms, empty.duration_ms) == (
        "aligned",
        0,
        None,
        3,
    )


def test_aggregate_refuses_two_stats_for_one_task() -> None:
    with pytest.raises(ValueError, match="several stats for one task index"):
        aggregate(1, 0, 1, [task(0, 1), task(0, 2)])


def test_task_stats_validation_and_dict_round_trip() -> None:
    stats = task(
        4, 77, cut=True, rows_written=9, rows_replayed=9, rows_spilled=3, state_file_bytes=100
    )
    assert TaskBarrierStats.from_dict(json.loads(json.dumps(stats.to_dict()))) == stats
    with pytest.raises(ValueError, match="negative"):
        task(0, 0, rows_spilled=-1)
    with pytest.raises(ValueError, match="rows_replayed > rows_written"):
        task(0, 0, rows_written=1, rows_replayed=2)


def test_write_read_round_trip(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "cp")
    fs = pafs.LocalFileSystem()
    for batch_id in (12, 3, 7):
        path = write_metrics(Checkpoint.resolve(checkpoint, fs), unaligned_batch(batch_id))
        assert path == f"{checkpoint}/unaligned/metrics/{batch_id}.json"
    records = read_metrics(Checkpoint.resolve(checkpoint, fs))
    assert [m.batch_id for m in records] == [3, 7, 12]
    assert records[0] == unaligned_batch(3)
    assert sorted(p.name for p in (tmp_path / "cp" / "unaligned" / "metrics").iterdir()) == [
        "12.json",
        "3.json",
        "7.json",
    ]  # no temporary files left behind
    lines = metrics_jsonl(Checkpoint.resolve(checkpoint, fs)).splitlines()
    assert [json.loads(line)["batch_id"] for line in lines] == [3, 7, 12]
    assert BarrierMetrics.from_dict(json.loads(lines[1])) == unaligned_batch(7)


def test_commit_again_replaces_the_batch_record(tmp_path: Path) -> None:
    checkpoint = f"file://{tmp_path}/cp"
    write_metrics(Checkpoint.resolve(checkpoint), unaligned_batch(4))
    again = aggregate(4, BATCH_START, BATCH_START + 99, [task(0, BATCH_START, rows_written=1)])
    write_metrics(Checkpoint.resolve(checkpoint), again)
    assert read_metrics(Checkpoint.resolve(checkpoint)) == [again]


def test_no_metrics_yet(tmp_path: Path) -> None:
    assert read_metrics(Checkpoint.resolve(str(tmp_path / "nothing"))) == []
    assert metrics_jsonl(Checkpoint.resolve(str(tmp_path / "nothing"))) == ""


def test_other_files_are_ignored_and_malformed_records_named(tmp_path: Path) -> None:
    checkpoint = str(tmp_path)
    write_metrics(Checkpoint.resolve(checkpoint), unaligned_batch(1))
    directory = tmp_path / "unaligned" / "metrics"
    (directory / "2.json.abc.tmp").write_text("half a rec")
    assert [m.batch_id for m in read_metrics(Checkpoint.resolve(checkpoint))] == [1]
    (directory / "3.json").write_text('{"batch_id": 3}')
    with pytest.raises(CommitLogError, match=r"metrics/3\.json is malformed"):
        read_metrics(Checkpoint.resolve(checkpoint))
    (directory / "3.json").write_text(unaligned_batch(4).to_json())
    with pytest.raises(CommitLogError, match=r"metrics/3\.json holds batch 4, not 3"):
        read_metrics(Checkpoint.resolve(checkpoint))


def test_purge_metrics(tmp_path: Path) -> None:
    for batch_id in range(6):
        write_metrics(Checkpoint.resolve(str(tmp_path)), unaligned_batch(batch_id))
    assert purge_metrics(Checkpoint.resolve(str(tmp_path)), before_batch_id=4) == 4
    assert purge_metrics(Checkpoint.resolve(str(tmp_path)), before_batch_id=4) == 0
    assert [m.batch_id for m in read_metrics(Checkpoint.resolve(str(tmp_path)))] == [4, 5]
