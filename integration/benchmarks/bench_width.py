"""Wide topics: ours against Spark's Kafka connector at 8, 1,000 and 4,000 partitions.

Run: ``python -m benchmarks width`` (``./dev bench width``). Prints a table and writes
``integration/benchmarks/results/width.json``.

One embedded broker and one Spark ``local[N]`` session (N = CPU count) with Spark's connector
on ``spark.jars`` (:mod:`benchmarks.peer_connector`). Per width, a topic of that many
partitions holds ``BATCHES`` x 100,000 records of 100-byte values (keyed, spread by kcat's
partitioner); every contender reads it from the earliest offsets with ``maxOffsetsPerTrigger``
100,000 under ``availableNow`` into Spark's ``noop`` sink (the source alone), one after the
other in the same session:

- ``ours``: ``format("unaligned")`` with its default ``readTasks`` (the driver's cores);
- ``ours readTasks=4xcores``: four read tasks per core;
- ``ours readTasks=P``: one read task per partition (Spark's own layout);
- ``spark``: ``format("kafka")`` with its defaults (one task per partition);
- ``spark minPartitions=16``: Spark splits partitions into about 16 tasks when it has fewer
  (its ``KafkaOffsetRangeCalculator`` only splits, never merges: at 1,000 and 4,000 partitions
  the plan is the default's, so it runs only at 8).

Per contender: the batches' median planning time (``durationMs.latestOffset`` +
``queryPlanning``: what the driver spends before the batch's tasks; a Python source's
``partitions()`` runs inside ``addBatch``), median ``addBatch`` and trigger time, and records/s
in batches (records / the sum of ``triggerExecution``) and by wall clock (``start()`` to the
end); ratios against ``spark`` of the same width in the same run. A warm-up query of each
format runs first. Sizes from the environment: ``UNALIGNED_BENCH_WIDTHS`` (8,1000,4000),
``UNALIGNED_BENCH_WIDTH_BATCHES`` (4), ``UNALIGNED_BENCH_WIDTH_CONTENDERS`` (all, by name).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.compare import connectors
from benchmarks.compare.inputs import VALUE_BYTES, env_ints, prepare_process
from benchmarks.peer_connector import ensure_connector

RECORDS_PER_BATCH = 100_000
DEFAULT_WIDTHS = (8, 1_000, 4_000)
DEFAULT_BATCHES = 4
SPLIT_INTO = 16
CONTENDERS = (
    "ours",
    "ours readTasks=4xcores",
    "ours readTasks=P",
    "spark",
    f"spark minPartitions={SPLIT_INTO}",
)


def produce_keyed(bootstrap: str, topic: str, records: int) -> float:
    """``records`` keyed records (``k<i>``, 100-byte values) spread over the topic's partitions
    by kcat's partitioner, in one ``kcat -P``; returns seconds."""
    started = time.monotonic()
    command = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-K", ":", "-z", "none"]
    command += ["-X", "linger.ms=50", "-X", "batch.size=1000000"]
    lines = b"\n".join(b"k%d:" % i + (b"%d-" % i).ljust(VALUE_BYTES, b".") for i in range(records))
    subprocess.run(command, input=lines + b"\n", check=True)
    return time.monotonic() - started


def contender(name: str, partitions: int) -> tuple[connectors.Connector, dict[str, str]] | None:
    """The connector and extra source options of ``name`` at ``partitions`` (``None``: it
    would plan exactly what another contender plans)."""
    if name == "ours":
        return connectors.OURS, {}
    if name == "ours readTasks=4xcores":
        return connectors.OURS, {"readTasks": str(4 * (os.cpu_count() or 1))}
    if name == "ours readTasks=P":
        return connectors.OURS, {"readTasks": str(partitions)}
    if name == "spark":
        return connectors.PEER, {}
    if name == f"spark minPartitions={SPLIT_INTO}":
        if partitions >= SPLIT_INTO:
            return None
        return connectors.PEER, {"minPartitions": str(SPLIT_INTO)}
    raise ValueError(f"unknown contender {name!r}; known: {', '.join(CONTENDERS)}")


def run_query(
    spark: Any,
    connector: connectors.Connector,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    extra: Mapping[str, str],
) -> dict[str, Any]:
    df = connectors.read_stream(spark, connector, bootstrap, topic, RECORDS_PER_BATCH, **extra)
    started = time.monotonic()
    query = connectors.write_stream(df, connector, "noop", str(checkpoint), bootstrap).start()
    query.awaitTermination()
    wall_s = time.monotonic() - started
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(int(p["numInputRows"]) for p in progress)
    durations = [p["durationMs"] for p in progress]
    planning = [d.get("latestOffset", 0) + d.get("queryPlanning", 0) for d in durations]
    batch_s = sum(d["triggerExecution"] for d in durations) / 1000
    return {
        "batches": len(progress),
        "rows": rows,
        "planning_ms_p50": statistics.median(planning),
        "latest_offset_ms_p50": statistics.median(d.get("latestOffset", 0) for d in durations),
        "add_batch_ms_p50": statistics.median(d.get("addBatch", 0) for d in durations),
        "trigger_ms_p50": statistics.median(d["triggerExecution"] for d in durations),
        "records_per_s_in_batches": round(rows / batch_s),
        "records_per_s_wall": round(rows / wall_s),
        "wall_s": round(wall_s, 2),
        "planning_ms": planning,
        "trigger_ms": [d["triggerExecution"] for d in durations],
    }


def with_ratios(results: Sequence[dict[str, Any]]) -> None:
    """Each result of a width gets its ratios against ``spark`` of that width."""
    by_width: dict[int, dict[str, Any]] = {
        r["partitions"]: r for r in results if r["contender"] == "spark"
    }
    for r in results:
        peer = by_width.get(r["partitions"])
        if peer is None:
            continue
        r["records_per_s_vs_spark"] = round(
            r["records_per_s_in_batches"] / peer["records_per_s_in_batches"], 2
        )
        r["wall_records_per_s_vs_spark"] = round(
            r["records_per_s_wall"] / peer["records_per_s_wall"], 2
        )
        r["planning_time_vs_spark"] = round(
            r["planning_ms_p50"] / max(peer["planning_ms_p50"], 1), 2
        )


def print_table(results: Sequence[dict[str, Any]]) -> None:
    header = (
        f"{'partitions':>10} {'contender':<24} {'plan ms':>8} {'addBatch':>9} {'trigger':>8} "
        f"{'rec/s batches':>13} {'rec/s wall':>11} {'x spark':>8} {'x wall':>7} {'plan x':>7}"
    )
    print(header)
    for r in results:
        ratios = [
            r.get(key, "-")
            for key in (
                "records_per_s_vs_spark",
                "wall_records_per_s_vs_spark",
                "planning_time_vs_spark",
            )
        ]
        print(
            f"{r['partitions']:>10,} {r['contender']:<24} {r['planning_ms_p50']:>8.0f} "
            f"{r['add_batch_ms_p50']:>9.0f} {r['trigger_ms_p50']:>8.0f} "
            f"{r['records_per_s_in_batches']:>13,} {r['records_per_s_wall']:>11,} "
            f"{ratios[0]:>8} {ratios[1]:>7} {ratios[2]:>7}"
        )


def main() -> dict[str, Any]:
    prepare_process()
    from unaligned.testing import EmbeddedKafka

    widths = env_ints("UNALIGNED_BENCH_WIDTHS", DEFAULT_WIDTHS)
    batches = env_ints("UNALIGNED_BENCH_WIDTH_BATCHES", (DEFAULT_BATCHES,))[0]
    names = [
        n.strip()
        for n in os.environ.get("UNALIGNED_BENCH_WIDTH_CONTENDERS", ",".join(CONTENDERS)).split(",")
        if n.strip()
    ]
    connector = ensure_connector()
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-width-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        spark = connectors.spark_session("bench-width", connector.spark_jars())
        try:
            kafka.create_topic("width-warmup", partitions=8)
            produce_keyed(kafka.bootstrap_servers, "width-warmup", RECORDS_PER_BATCH)
            for warm in (connectors.OURS, connectors.PEER):
                run_query(
                    spark,
                    warm,
                    kafka.bootstrap_servers,
                    "width-warmup",
                    Path(tmp) / f"warmup-{warm.name}",
                    {},
                )
            for partitions in widths:
                topic = f"width-{partitions}"
                kafka.create_topic(topic, partitions=partitions)
                produce_s = produce_keyed(
                    kafka.bootstrap_servers, topic, RECORDS_PER_BATCH * batches
                )
                print(
                    f"{partitions:,} partitions: produced {RECORDS_PER_BATCH * batches:,} "
                    f"records in {produce_s:.1f} s",
                    flush=True,
                )
                for name in names:
                    chosen = contender(name, partitions)
                    if chosen is None:
                        continue
                    which, extra = chosen
                    result = run_query(
                        spark,
                        which,
                        kafka.bootstrap_servers,
                        topic,
                        Path(tmp) / f"cp-{partitions}-{len(results)}",
                        extra,
                    )
                    result.update(partitions=partitions, contender=name, options=extra)
                    results.append(result)
                    print(
                        f"  {name:<24} planning {result['planning_ms_p50']:.0f} ms, "
                        f"{result['records_per_s_in_batches']:,} records/s in batches, "
                        f"{result['records_per_s_wall']:,} by wall ({result['batches']} batches)",
                        flush=True,
                    )
        finally:
            spark.stop()
    with_ratios(results)
    print_table(results)
    report = {
        "benchmark": "width",
        "records_per_batch": RECORDS_PER_BATCH,
        "batches": batches,
        "value_bytes": VALUE_BYTES,
        "cpus": os.cpu_count(),
        "spark_sql_kafka": connector.spark_version,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "results": results,
    }
    write_results("width", report)
    return report


if __name__ == "__main__":
    main()
