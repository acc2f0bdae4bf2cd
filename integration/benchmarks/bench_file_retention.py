"""What the file sink's metadata costs after many batches, without and with ``retention``.

Run: ``python -m benchmarks.bench_file_retention [batches] [files_per_batch] [retained]`` (default
10,000 batches of 2 files, retention = the last 1,000 batches' worth of time).

Drives the file participant's driver steps for each batch - 2d (the batch into
``_spark_metadata``, compacting it every 10 log ids, then the manifest entry) and 2f (the
manifest's compaction, every 100 batches) - over a local output path, twice in the same run:
without a retention (the peer) and with one. Time is simulated: the wall clock the sink reads
(``time.time``) moves one second per batch, and each batch is decided at that time, so a
retention of ``retained`` seconds keeps about the newest ``retained`` batches and the log's
clean-up delay (10 minutes) passes after 600 batches. No data file is written (these steps only
name files).

Printed and written to ``results/file_retention.json``, at several batch counts: the
manifest's and the log's files and bytes, each one's compaction (ms, the median of the last 5),
what a reader pays to list them (our reader: every manifest entry; Spark's: ``allFiles``), and
the median driver time of the last 100 batches; with the ratio retention / none for each.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql.types import LongType, StructField, StructType

from benchmarks import write_results

QUERY = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
SCHEMA = StructType([StructField("id", LongType())])


def _dir_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.iterdir() if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


class SimulatedClock:
    """``time.time`` for the sink while a run lasts: one second more per batch."""

    def __init__(self) -> None:
        self.now = time.time()
        self._real = time.time

    def __enter__(self) -> SimulatedClock:
        time.time = lambda: self.now  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        time.time = self._real  # type: ignore[assignment]


def _recent(durations: list[float]) -> float:
    """The median of the last 5 (0 before the first)."""
    return round(statistics.median(durations[-5:]), 1) if durations else 0.0


def _live_log_bytes(directory: Path) -> int:
    """Bytes of what Spark's readers and the next compaction read: the newest compaction
    file and the files after it."""
    ids = sorted((int(p.name.split(".")[0]), p) for p in directory.iterdir())
    compacts = [i for i, p in ids if p.name.endswith(".compact")]
    start = compacts[-1] if compacts else 0
    return sum(p.stat().st_size for i, p in ids if i >= start)


def run(batches: int, files: int, retention_s: int | None, marks: list[int]) -> list[dict]:
    from unaligned.sink.commit_log import CommitRecord
    from unaligned.sink.files.committed_files import manifest_entries
    from unaligned.sink.files.file_manifest import MANIFEST_DIR, final_name
    from unaligned.sink.files.file_participant import FileParticipant
    from unaligned.sink.files.spark_log_layout import SPARK_METADATA_DIR
    from unaligned.sink.options import FileTarget

    with tempfile.TemporaryDirectory() as tmp, SimulatedClock() as clock:
        out = Path(tmp) / "out"
        target = FileTarget(
            str(out), "snappy", retention_ms=None if retention_s is None else retention_s * 1000
        )
        participant = FileParticipant(target, SCHEMA, QUERY)
        spark_log = participant.spark_log()
        driver_ms: list[float] = []
        log_compactions: list[float] = []
        manifest_compactions: list[float] = []
        rows = []
        for batch in range(batches):
            items = tuple(
                {
                    "staged": f"unused/{batch}-{p}",
                    "final": final_name(batch, p, QUERY),
                    "rows": 20,
                    "bytes": 1900,
                    "partition": p,
                    "queryId": QUERY,
                }
                for p in range(files)
            )
            clock.now += 1
            record = CommitRecord(batch, "files", items, int(clock.now * 1000))
            started = time.perf_counter()
            participant.finish_batch(record)
            finished = time.perf_counter()
            folded = participant.compact_manifest(set(), batch)
            compacted = time.perf_counter()
            driver_ms.append((compacted - started) * 1000)
            if spark_log.files()[-1].compact:
                log_compactions.append((finished - started) * 1000)
            if folded:
                manifest_compactions.append((compacted - finished) * 1000)
            if batch + 1 in marks:
                started = time.perf_counter()
                ours = manifest_entries(participant.output())
                ours_ms = (time.perf_counter() - started) * 1000
                started = time.perf_counter()
                spark_view = spark_log.all_lines()
                spark_ms = (time.perf_counter() - started) * 1000
                manifest_files, manifest_bytes = _dir_size(out / MANIFEST_DIR)
                log_files, log_bytes = _dir_size(out / SPARK_METADATA_DIR)
                rows.append(
                    {
                        "batches": batch + 1,
                        "batches_listed": len(ours),
                        "manifest_files": manifest_files,
                        "manifest_bytes": manifest_bytes,
                        "manifest_compaction_ms": _recent(manifest_compactions),
                        "our_listing_ms": round(ours_ms, 1),
                        "log_files": log_files,
                        "log_bytes": log_bytes,
                        "log_live_bytes": _live_log_bytes(out / SPARK_METADATA_DIR),
                        "log_entries_seen": len(spark_view),
                        "log_compaction_ms": _recent(log_compactions),
                        "spark_listing_ms": round(spark_ms, 1),
                        "driver_ms_median_last_100": round(statistics.median(driver_ms[-100:]), 2),
                    }
                )
                print(f"  {'retention' if retention_s else 'none':>9} {rows[-1]}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[2:] if argv is None else argv
    batches = int(args[0]) if args else 10_000
    files = int(args[1]) if len(args) > 1 else 2
    retained = int(args[2]) if len(args) > 2 else 1_000
    marks = sorted({m for m in (100, 1_000, batches // 4, batches // 2, batches) if m <= batches})
    none = run(batches, files, None, marks)
    kept = run(batches, files, retained, marks)
    report: dict[str, Any] = {
        "batches": batches,
        "files_per_batch": files,
        "retention_s": retained,
        "simulated_seconds_per_batch": 1,
        "without_retention": none,
        "with_retention": kept,
        "ratio_retention_over_none": [
            {
                "batches": a["batches"],
                **{
                    key: round(b[key] / a[key], 3) if a[key] else None
                    for key in (
                        "manifest_bytes",
                        "manifest_compaction_ms",
                        "our_listing_ms",
                        "log_bytes",
                        "log_live_bytes",
                        "log_compaction_ms",
                        "spark_listing_ms",
                        "driver_ms_median_last_100",
                    )
                },
            }
            for a, b in zip(none, kept, strict=True)
        ],
    }
    print("ratio retention / none:")
    for row in report["ratio_retention_over_none"]:
        print(f"  {row}")
    write_results("file_retention", report)


if __name__ == "__main__":
    main(sys.argv[1:])
