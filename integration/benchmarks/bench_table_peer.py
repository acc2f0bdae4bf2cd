"""Kafka -> Iceberg and Kafka -> Delta: ours against Spark's own Kafka connector with the
official Iceberg and Delta streaming writers, and the floor.

Run: ``./dev bench table-peer`` (or ``python -m benchmarks table-peer`` from ``integration/``).
Prints a table and writes ``integration/benchmarks/results/table_peer.json``. Sizes:
``UNALIGNED_BENCH_RECORDS`` (default 5,000,000), ``UNALIGNED_BENCH_REPEATS`` (rounds, default 1).

One embedded broker, one input topic (100-byte values over 8 partitions, produced by kcat) and
one Spark session (``local[N]``, Spark's Kafka connector and the table jars on ``spark.jars``:
:mod:`benchmarks.peer_connector`, :mod:`benchmarks.table_peer_jars`). For each format, in turn
in each round, every query reading the whole topic with ``maxOffsetsPerTrigger`` 250,000 and
``availableNow``, columns ``key``, ``value``, ``partition``, ``offset``, into a new table:

- peer: ``readStream.format("kafka")`` -> ``writeStream.format("iceberg")`` (a Hadoop catalog
  ``peer``, ``toTable``) / ``writeStream.format("delta")`` (``start(path)``; the session has
  Delta's extension and catalog, as Delta requires), Spark's defaults;
- floor: ``readStream.format("unaligned")`` -> ``format("bench-floor")``
  (:mod:`benchmarks.floor_sink`), a Python sink that writes nothing;
- ours: ``readStream.format("unaligned")`` -> ``writeStream.format("unaligned")`` with
  ``tableFormat`` (Iceberg: the embedded SQLite catalog; Delta: a path), defaults.

Measured per query: records/s by wall clock (``start()`` to the end of ``awaitTermination()``)
and inside batches (the progress reports' ``triggerExecution``), and the median time per batch
(``triggerExecution``: read, write and commit) and its ``addBatch`` part. Ours' table is read
back (pyiceberg, deltalake) and must hold every record once. A contender that fails (the
official jars are built for Spark 4.1 and fail on pyspark 4.3) is reported with its error and
the others still run.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.compare.connectors import spark_session
from benchmarks.compare.inputs import PARTITIONS, env_ints, prepare_process, produce, uniform_counts
from benchmarks.floor_sink import FORMAT as FLOOR_FORMAT
from benchmarks.floor_sink import register as register_floor_sink
from benchmarks.peer_connector import ensure_connector
from benchmarks.proc_cpu import spark_jvm_pid, timed_query
from benchmarks.table_peer_jars import ensure_table_jars

SIZES = (5_000_000,)
MAX_OFFSETS_PER_TRIGGER = 250_000
FORMATS = ("iceberg", "delta")
CONTENDERS = ("peer", "floor", "ours")
COLUMNS = ("key", "value", "partition", "offset")
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def _source(spark: Any, contender: str, bootstrap: str, topic: str) -> Any:
    reader = spark.readStream.format("kafka" if contender == "peer" else "unaligned")
    return (
        reader.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
        .load()
        .select(*COLUMNS)
    )


def _writer(df: Any, contender: str, fmt: str, root: Path) -> tuple[Any, Any]:
    """The ``DataStreamWriter`` and a ``start`` that starts it."""
    writer = df.writeStream.option("checkpointLocation", str(root / "checkpoint")).trigger(
        availableNow=True
    )
    if contender == "floor":
        return writer.format(FLOOR_FORMAT), None
    if contender == "peer":
        if fmt == "iceberg":
            name = "peer.db." + root.name.replace("-", "_")
            return writer.format("iceberg"), lambda w: w.toTable(name)
        return writer.format("delta"), lambda w: w.start(str(root / "table"))
    writer = writer.format("unaligned").option("tableFormat", fmt)
    if fmt == "iceberg":
        return writer.option("path", "db.events").option("catalog.warehouse", str(root)), None
    return writer.option("path", str(root / "table")), None


def _count_ours(fmt: str, root: Path) -> int:
    from table_readers import TableUnderTest

    table = TableUnderTest(fmt, root if fmt == "iceberg" else root / "table")
    return int(table.read().num_rows)


class _Started:
    """Adapts a custom ``start`` (``toTable``, ``start(path)``) to :func:`timed_query`."""

    def __init__(self, writer: Any, start: Any) -> None:
        self.writer, self._start = writer, start

    def start(self) -> Any:
        return self._start(self.writer)


def run_query(
    spark: Any, kafka: Any, jvm_pid: int, contender: str, fmt: str, topic: str, root: Path
) -> dict[str, Any]:
    records = sum(kafka.end_offsets(topic).values())
    root.mkdir(parents=True)
    df = _source(spark, contender, kafka.bootstrap_servers, topic)
    writer, start = _writer(df, contender, fmt, root)
    try:
        run = timed_query(writer if start is None else _Started(writer, start), jvm_pid, None)
        exception = run.query.exception()
        if exception is not None:
            raise RuntimeError(str(exception))
    except Exception as exc:  # a peer whose jars do not run on this Spark: reported, not fatal
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        error = next((ln for ln in lines if "Error" in ln or "Exception" in ln), lines[0])
        return {"contender": contender, "format": fmt, "error": error.strip()[:500]}
    progress = [p for p in run.query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    if rows != records:
        raise RuntimeError(f"{contender} {fmt}: read {rows} records, expected {records}")
    if contender == "ours" and (written := _count_ours(fmt, root)) != records:
        raise RuntimeError(f"ours {fmt}: {written} rows in the table, expected {records}")
    trigger = [p["durationMs"]["triggerExecution"] for p in progress]
    add_batch = [p["durationMs"].get("addBatch", 0) for p in progress]
    return {
        "contender": contender,
        "format": fmt,
        "records": records,
        "batches": len(progress),
        "wall_s": round(run.wall_s, 2),
        "records_per_s_wall": round(records / run.wall_s),
        "records_per_s_in_batches": round(records / (sum(trigger) / 1000)),
        "batch_ms_median": round(statistics.median(trigger)),
        "add_batch_ms_median": round(statistics.median(add_batch)),
        "python_workers_cpu_s_per_million": round(run.cpu.python_workers_s * 1e6 / records, 2),
        "spark_jvm_cpu_s_per_million": round(run.cpu.jvm_s * 1e6 / records, 2),
    }


def _best(runs: list[dict[str, Any]], contender: str, fmt: str) -> dict[str, Any] | None:
    ok = [
        r for r in runs if r["contender"] == contender and r["format"] == fmt and "error" not in r
    ]
    return max(ok, key=lambda r: r["records_per_s_wall"]) if ok else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in FORMATS:
        best = {c: _best(runs, c, fmt) for c in CONTENDERS}
        errors = {r["contender"]: r["error"] for r in runs if r["format"] == fmt and "error" in r}
        row: dict[str, Any] = {"best": best, "errors": errors}
        ours = best["ours"]
        for over in ("peer", "floor"):
            base = best[over]
            if ours and base:
                row[f"ours_over_{over}_wall"] = round(
                    ours["records_per_s_wall"] / base["records_per_s_wall"], 3
                )
                row[f"ours_over_{over}_in_batches"] = round(
                    ours["records_per_s_in_batches"] / base["records_per_s_in_batches"], 3
                )
        out[fmt] = row
    return out


def _print(summary: dict[str, Any]) -> None:
    print(f"{'format':<8} {'contender':<6} {'rec/s wall':>11} {'rec/s batches':>14}", end="")
    print(f" {'batch ms':>9} {'addBatch ms':>12}")
    for fmt, row in summary.items():
        for contender, best in row["best"].items():
            if best is None:
                print(f"{fmt:<8} {contender:<6} failed: {row['errors'].get(contender, '?')}")
                continue
            print(
                f"{fmt:<8} {contender:<6} {best['records_per_s_wall']:>11,}"
                f" {best['records_per_s_in_batches']:>14,} {best['batch_ms_median']:>9,}"
                f" {best['add_batch_ms_median']:>12,}"
            )
        for over in ("peer", "floor"):
            if f"ours_over_{over}_wall" in row:
                print(
                    f"{fmt:<8} ours/{over}: {row[f'ours_over_{over}_wall']:.2f} (wall), "
                    f"{row[f'ours_over_{over}_in_batches']:.2f} (in batches)"
                )


def main() -> dict[str, Any]:
    prepare_process()
    from unaligned.testing import EmbeddedKafka

    connector = ensure_connector()
    tables = ensure_table_jars()
    records = env_ints("UNALIGNED_BENCH_RECORDS", SIZES)[0]
    records -= records % PARTITIONS
    repeats = env_ints("UNALIGNED_BENCH_REPEATS", (1,))[0]
    runs: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-table-peer-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        work = Path(tmp)
        jars = f"{connector.spark_jars()},{tables.spark_jars()}"
        spark = spark_session(
            "bench-table-peer",
            jars,
            {
                "spark.sql.catalog.peer": "org.apache.iceberg.spark.SparkCatalog",
                "spark.sql.catalog.peer.type": "hadoop",
                "spark.sql.catalog.peer.warehouse": str(work / "peer-warehouse"),
                # format("delta") streaming refuses to run without them
                "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
            },
        )
        register_floor_sink(spark)
        try:
            jvm_pid = spark_jvm_pid(kafka.broker_pid)
            kafka.create_topic("in", partitions=PARTITIONS)
            produce_s = produce(kafka.bootstrap_servers, "in", uniform_counts(records))
            print(f"produced {records:,} records in {produce_s:.1f} s", flush=True)
            for i in range(repeats):
                for fmt in FORMATS:
                    for contender in CONTENDERS:
                        root = work / f"{fmt}-{contender}-{i}"
                        run = run_query(spark, kafka, jvm_pid, contender, fmt, "in", root)
                        runs.append(run)
                        print(f"  {fmt} {contender} round {i}: {run}", flush=True)
        finally:
            spark.stop()
    summary = summarise(runs)
    _print(summary)
    report = {
        "benchmark": "table_peer",
        "records": records,
        "partitions": PARTITIONS,
        "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER,
        "spark_master": f"local[{os.cpu_count() or 2}]",
        "peer_jars": {"spark_sql_kafka": connector.spark_version, **tables.versions},
        "summary": summary,
        "runs": runs,
    }
    write_results("table_peer", report)
    return report


if __name__ == "__main__":
    main()
