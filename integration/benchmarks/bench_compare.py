"""Ours against Spark's own Kafka connector, four workloads side by side (issue 11).

Run: ``./dev bench compare`` (or ``python -m benchmarks compare`` from ``integration/``). Prints a
table, writes ``integration/benchmarks/results/results.json`` and one PNG per workload beside it
(:mod:`benchmarks.compare.figures`), with the machine (cores, versions) in both.

One embedded broker and one Spark ``local[N]`` session (N = CPU count, Spark's Kafka connector
on ``spark.jars``, fetched by Maven beforehand: :mod:`benchmarks.peer_connector`) for workloads
1 and 2; workloads 3 and 4 run each query in a process of its own so its driver can be killed.
The workloads are described in their modules: :mod:`benchmarks.compare.throughput`,
:mod:`~benchmarks.compare.backpressure`, :mod:`~benchmarks.compare.driver_kills`,
:mod:`~benchmarks.compare.recovery`. Sizes from the environment:

======================================  ===========  ======================================
``UNALIGNED_BENCH_RECORDS``             5,000,000    workload 1's records
``UNALIGNED_BENCH_REPEATS``             2            workload 1's runs per contender
``UNALIGNED_BENCH_SKEWED_RECORDS``      400,000      workloads 2 and 4 (hot partition: half)
``UNALIGNED_BENCH_UDF_RECORDS``         60,000       workload 2's slow-UDF variant
``UNALIGNED_BENCH_KILL_RECORDS``        1,200,000    workload 3
``UNALIGNED_BENCH_KILL_EVERY_S``        20           workload 3's seconds between kills
======================================  ===========  ======================================

The machine is shared (2 cores here): figures of one machine at one time, never a gate.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS_DIR, local_spark, write_results
from benchmarks.compare import (
    backpressure,
    connectors,
    driver_kills,
    figures,
    inputs,
    recovery,
    throughput,
)
from benchmarks.peer_connector import ensure_connector

WARMUP_RECORDS = 80_000


def _warm_up(spark: Any, kafka: Any, work: Path) -> None:
    """One small query per contender (JIT, Python workers): not counted."""
    kafka.create_topic("warmup", partitions=inputs.PARTITIONS)
    inputs.produce(kafka.bootstrap_servers, "warmup", inputs.uniform_counts(WARMUP_RECORDS))
    for connector in connectors.ALL:
        kafka.create_topic(f"warmup-{connector.name}", partitions=inputs.PARTITIONS)
        df = connectors.read_stream(spark, connector, kafka.bootstrap_servers, "warmup", 40_000)
        connectors.write_stream(
            df,
            connector,
            f"kafka:warmup-{connector.name}",
            str(work / f"warmup-{connector.name}"),
            kafka.bootstrap_servers,
        ).start().awaitTermination()


def _print_table(report: dict[str, Any]) -> None:
    w1 = report["throughput"]
    print(f"\n== workload 1: records/s, {w1['records']:,} records (best of {w1['repeats']})")
    print(
        f"{'output':<10}{'peer':>12}{'peer-tuned':>12}{'ours':>12}{'ours/peer':>11}"
        f"{'ours/tuned':>11}"
    )
    for output, o in w1["outputs"].items():
        b = o["best_records_per_s"]
        print(
            f"{output:<10}{b['peer']:>12,}{b['peer-tuned']:>12,}{b['ours']:>12,}"
            f"{o['ours_over_peer']:>11.2f}{o['ours_over_peer_tuned']:>11.2f}"
        )
    print(f"kcat reads {w1['kcat_read_records_per_s']:,} records/s")
    w2 = report["backpressure"]
    print(f"\n== workload 2: throttled to {w2['quota_bytes_per_s']:,} B/s, hot partition")
    print(
        f"{'variant':<22}{'batches':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'1st commit s':>13}{'state B/batch':>15}"
    )
    for name, r in w2["throttled"].items():
        state = r.get("channel_state_bytes_per_batch")
        mean_state = f"{sum(state) / len(state):,.0f}" if state else "-"
        print(
            f"{name:<22}{r['batches']:>8}{r['duration_ms_p50']:>9,.0f}{r['duration_ms_p99']:>9,}"
            f"{r['duration_ms_max']:>9,}{r['first_commit_s']:>13}{mean_state:>15}"
        )
    for name, r in w2["slow_udf"]["runs"].items():
        print(
            f"slow UDF {name:<13}{r['batches']:>8}{r['duration_ms_p50']:>9,.0f}"
            f"{r['duration_ms_p99']:>9,}{r['duration_ms_max']:>9,}{r['first_commit_s']:>13}"
        )
    w3 = report["driver_kills"]
    print(f"\n== workload 3: driver killed every {w3['kill_every_s']:.0f} s")
    for name, r in w3["contenders"].items():
        print(
            f"{name:<8} {r['kills']} kills, all committed after {r['seconds_to_end']} s, "
            f"duplicates {r['duplicates']:,}, missing {r['missing']:,}"
        )
    print("\n== workload 4: restart to the first committed batch")
    for name, r in report["recovery"]["variants"].items():
        print(f"{name:<26} {r['restart_to_first_commit_s']:>6} s")
    print(f"\nmachine: {inputs.describe_machine(report['machine'])}")


def main() -> dict[str, Any]:
    inputs.prepare_process()
    from unaligned.testing import EmbeddedKafka

    connector = ensure_connector()
    records = inputs.env_ints("UNALIGNED_BENCH_RECORDS", (5_000_000,))[0]
    repeats = inputs.env_ints("UNALIGNED_BENCH_REPEATS", (2,))[0]
    skewed = inputs.env_ints("UNALIGNED_BENCH_SKEWED_RECORDS", (400_000,))[0]
    udf_records = inputs.env_ints("UNALIGNED_BENCH_UDF_RECORDS", (60_000,))[0]
    kill_records = inputs.env_ints("UNALIGNED_BENCH_KILL_RECORDS", (1_200_000,))[0]
    kill_every_s = inputs.env_ints("UNALIGNED_BENCH_KILL_EVERY_S", (20,))[0]
    started = time.monotonic()
    report: dict[str, Any] = {"benchmark": "compare"}
    with (
        tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        work = Path(tmp)
        cores = os.cpu_count() or 2
        conf = {"spark.jars": connector.spark_jars(), "spark.driver.memory": "2g"}
        spark = local_spark("bench-compare", cores, **conf)
        try:
            report["machine"] = inputs.machine_info(spark, connector)
            report["spark_master"] = f"local[{cores}]"
            _warm_up(spark, kafka, work)
            report["throughput"] = throughput.run(spark, kafka, work, records, repeats)
            ours_rate = report["throughput"]["outputs"]["kafka"]["best_records_per_s"]["ours"]
            report["backpressure"] = backpressure.run(
                spark, kafka, work, skewed, udf_records, ours_rate
            )
        finally:
            spark.stop()
        quota = report["backpressure"]["quota_bytes_per_s"]
        jars = connector.spark_jars()
        report["driver_kills"] = driver_kills.run(
            kafka, work, kill_records, quota, jars, kill_every_s
        )
        report["recovery"] = recovery.run(kafka, work, skewed, quota, jars)
    report["seconds"] = round(time.monotonic() - started)
    _print_table(report)
    write_results("results", report)
    figures.draw_all(report, RESULTS_DIR)
    return report


if __name__ == "__main__":
    main()
