"""What one batch's commit costs the driver, batch after batch, into Delta and Iceberg tables.

Run: ``./dev bench table-commits`` (``UNALIGNED_BENCH_TABLE_BATCHES`` batches, default 1,000; 4
task files of 1,000 rows per batch).

Drives the sink's steps for each batch in one process, with the real participants: the tasks'
data files written by the table task writer (step 1), then the driver's decision (2b: files
checked), the table commit (2c: the "already committed?" read and one table commit) and the
clean-up (2f: one listing of the data folder). Timed: the table commit (2c) alone, and the
driver's steps together. The sinks: ``delta``; ``iceberg`` (embedded SQLite catalog, no
maintenance); ``iceberg+keep`` (option ``keepSnapshots=50``: the sink expires old snapshots);
and the peer ``files``, the Parquet file sink's participant over the same rows (its 2b-2f:
renames, ``_spark_metadata``, manifest) as the floor of what a commit per batch costs here.

Printed and written to ``results/table_commits.json``: per sink the median and mean commit time
of the first and the last 100 batches and their ratio (growth with the table's history), the
driver's median over the same windows, and each sink's last-100 driver median against the
file sink's.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import write_results
from table_sink_steps import new_checkpoint, participant, rows, sink_options
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog, CommitRecord

TASKS = 4
ROWS = 1000
WINDOW = 100
KEEP_SNAPSHOTS = "50"


def _task_items(made: Any, batch: int) -> list[dict[str, Any]]:
    items = []
    for task in range(TASKS):
        writer = made.open_task(batch, task, 0)
        writer.write_chunk(rows(task, batch, n=ROWS))
        items.append(writer.prepare())
        writer.close()
    return items


def _driver(
    made: Any, log: CommitLog, batch: int, items: list[dict[str, Any]]
) -> tuple[float, float]:
    """The driver's steps of one batch: (all of them, the table commit alone), in ms."""
    started = time.perf_counter()
    made.check_decidable(items, batch)
    log.write(CommitRecord(batch, made.kind, tuple(items), int(time.time() * 1000)))
    commit_started = time.perf_counter()
    made.commit(items, batch, lambda n: None)
    commit = time.perf_counter() - commit_started
    made.finish_batch(log.read(batch))
    log.mark_done(batch)
    made.clean_up(log, batch)
    log.prune(100)
    return (time.perf_counter() - started) * 1000, commit * 1000


def _file_sink(root: Path, checkpoint: Path) -> Any:
    from pyspark.sql.types import StructType

    from table_sink_steps import SCHEMA
    from unaligned.sink.files.file_participant import FileParticipant
    from unaligned.sink.options import FileTarget

    schema: StructType = SCHEMA
    return FileParticipant.for_query(
        FileTarget(str(root / "files"), "snappy"), schema, Checkpoint.resolve(str(checkpoint))
    )


def _window(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(times), 2),
        "mean_ms": round(statistics.mean(times), 2),
    }


def _run(sink: str, root: Path, batches: int) -> dict[str, Any]:
    checkpoint = new_checkpoint(root)
    if sink == "files":
        made = _file_sink(root, checkpoint)
    else:
        extra = {"keepSnapshots": KEEP_SNAPSHOTS} if sink == "iceberg+keep" else {}
        made = participant(sink_options(sink.split("+")[0], root, checkpoint, **extra))
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    driver, commit = [], []
    for batch in range(batches):
        items = _task_items(made, batch)
        total, committed = _driver(made, log, batch, items)
        driver.append(total)
        commit.append(committed)
    first, last = _window(commit[:WINDOW]), _window(commit[-WINDOW:])
    return {
        "sink": sink,
        "batches": batches,
        "commit_first": first,
        "commit_last": last,
        "commit_growth_median": round(last["median_ms"] / first["median_ms"], 2),
        "commit_growth_mean": round(last["mean_ms"] / first["mean_ms"], 2),
        "driver_first": _window(driver[:WINDOW]),
        "driver_last": _window(driver[-WINDOW:]),
        "driver_growth_median": round(
            statistics.median(driver[-WINDOW:]) / statistics.median(driver[:WINDOW]), 2
        ),
    }


def main() -> None:
    batches = int(os.environ.get("UNALIGNED_BENCH_TABLE_BATCHES", "1000"))
    sinks = os.environ.get("UNALIGNED_BENCH_TABLE_SINKS", "files,delta,iceberg,iceberg+keep")
    results = []
    for sink in sinks.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            result = _run(sink, Path(tmp), batches)
        results.append(result)
        f, l_ = result["commit_first"], result["commit_last"]
        print(
            f"{sink:13s} commit ms per batch, first {WINDOW}: median {f['median_ms']:.1f} "
            f"mean {f['mean_ms']:.1f}; last {WINDOW}: median {l_['median_ms']:.1f} mean "
            f"{l_['mean_ms']:.1f} (x{result['commit_growth_median']} median, "
            f"x{result['commit_growth_mean']} mean); driver median "
            f"{result['driver_first']['median_ms']:.1f} -> "
            f"{result['driver_last']['median_ms']:.1f} (x{result['driver_growth_median']})",
            flush=True,
        )
    files = [r for r in results if r["sink"] == "files"]
    for result in results:
        if files and result is not files[0]:
            floor = files[0]["driver_last"]["median_ms"]
            result["vs_files"] = round(result["driver_last"]["median_ms"] / floor, 2)
            print(
                f"{result['sink']:13s} last {WINDOW} driver against the file sink: "
                f"x{result['vs_files']}"
            )
    write_results(
        "table_commits",
        {"batches": batches, "tasks": TASKS, "rows_per_task": ROWS, "results": results},
    )


if __name__ == "__main__":
    main()
