"""What one batch's commit costs the driver, batch after batch, into Delta and Iceberg tables.

Run: ``./dev bench table-commits`` (``UNALIGNED_BENCH_TABLE_BATCHES`` batches, default 500; 4
task files of 1,000 rows per batch).

Drives the sink's steps for each batch in one process, with the real participants: the tasks'
data files written by the table task writer (step 1), then the driver's decision (2b: files
checked), the table commit (2c: the "already committed?" read and one table commit) and the
clean-up (2f: one listing of the data folder). Timed: the driver's steps only. The sinks:
``delta``; ``iceberg`` (embedded SQLite catalog); ``iceberg+expiry`` (snapshots older than the
newest 20 expired every 100 batches, as the guide recommends); and the peer ``files``, the
Parquet file sink's participant over the same rows (its 2b-2f: renames, ``_spark_metadata``,
manifest) as the floor of what a commit per batch costs here.

Printed and written to ``results/table_commits.json``: per sink the median driver time of the
first and the last 50 batches and their ratio (growth with the table's history), and each
sink's last-50 median against the file sink's.
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
WINDOW = 50


def _task_items(made: Any, batch: int) -> list[dict[str, Any]]:
    items = []
    for task in range(TASKS):
        writer = made.open_task(batch, task, 0)
        writer.write_chunk(rows(task, batch, n=ROWS))
        items.append(writer.prepare())
        writer.close()
    return items


def _driver(made: Any, log: CommitLog, batch: int, items: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    made.check_decidable(items, batch)
    log.write(CommitRecord(batch, made.kind, tuple(items), int(time.time() * 1000)))
    made.commit(items, batch, lambda n: None)
    made.finish_batch(log.read(batch))
    log.mark_done(batch)
    made.clean_up(log, batch)
    log.prune(100)
    return (time.perf_counter() - started) * 1000


def _expire(made: Any) -> None:
    table = made.table().load()
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    if len(snapshots) > 20:
        cutoff = snapshots[-20].timestamp_ms
        import datetime as dt

        table.maintenance.expire_snapshots().older_than(
            dt.datetime.fromtimestamp(cutoff / 1000, dt.timezone.utc)
        ).commit()


def _file_sink(root: Path, checkpoint: Path) -> Any:
    from pyspark.sql.types import StructType

    from table_sink_steps import SCHEMA
    from unaligned.sink.files.file_participant import FileParticipant
    from unaligned.sink.options import FileTarget

    schema: StructType = SCHEMA
    return FileParticipant.for_query(
        FileTarget(str(root / "files"), "snappy"), schema, Checkpoint.resolve(str(checkpoint))
    )


def _run(sink: str, root: Path, batches: int) -> dict[str, Any]:
    checkpoint = new_checkpoint(root)
    if sink == "files":
        made = _file_sink(root, checkpoint)
    else:
        made = participant(sink_options(sink.split("+")[0], root, checkpoint))
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    times = []
    for batch in range(batches):
        items = _task_items(made, batch)
        times.append(_driver(made, log, batch, items))
        if sink == "iceberg+expiry" and batch % 100 == 99:
            _expire(made)
    first = statistics.median(times[:WINDOW])
    last = statistics.median(times[-WINDOW:])
    return {
        "sink": sink,
        "batches": batches,
        "first_ms": round(first, 2),
        "last_ms": round(last, 2),
        "growth": round(last / first, 2),
    }


def main() -> None:
    batches = int(os.environ.get("UNALIGNED_BENCH_TABLE_BATCHES", "500"))
    results = []
    for sink in ("files", "delta", "iceberg", "iceberg+expiry"):
        with tempfile.TemporaryDirectory() as tmp:
            result = _run(sink, Path(tmp), batches)
        results.append(result)
        print(
            f"{sink:15s} driver ms per batch: first {WINDOW} {result['first_ms']:.1f}, "
            f"last {WINDOW} {result['last_ms']:.1f} (x{result['growth']})",
            flush=True,
        )
    floor = results[0]["last_ms"]
    for result in results[1:]:
        result["vs_files"] = round(result["last_ms"] / floor, 2)
        print(f"{result['sink']:15s} last {WINDOW} against the file sink: x{result['vs_files']}")
    write_results(
        "table_commits",
        {"batches": batches, "tasks": TASKS, "rows_per_task": ROWS, "results": results},
    )


if __name__ == "__main__":
    main()
