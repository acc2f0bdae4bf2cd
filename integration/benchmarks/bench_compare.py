"""Ours against Spark's own Kafka connector, five workloads side by side (issues 11 and 20).

Run: ``./dev bench compare`` (or ``python -m benchmarks compare`` from ``integration/``). Prints a
table, writes ``integration/benchmarks/results/results.json`` and one PNG per workload beside it
(:mod:`benchmarks.compare.figures`), with the machine (cores, versions) in both.

One embedded broker and one Spark ``local[N]`` session (N = CPU count, Spark's Kafka connector
on ``spark.jars``, fetched by Maven beforehand: :mod:`benchmarks.peer_connector`) for workloads
1, 2 and 5; workloads 3 and 4 run each query in a process of its own so its driver can be killed.
The workloads are described in their modules: :mod:`benchmarks.compare.throughput`,
:mod:`~benchmarks.compare.backpressure`, :mod:`~benchmarks.compare.driver_kills`,
:mod:`~benchmarks.compare.recovery`, :mod:`~benchmarks.compare.latency`. Sizes from the
environment:

======================================  ===========  ======================================
``UNALIGNED_BENCH_WORKLOADS``           1,2,3,4,5    which workloads run (numbers or names:
                                                     ``throughput``, ``backpressure``,
                                                     ``driver_kills``, ``recovery``,
                                                     ``latency``)
``UNALIGNED_BENCH_RECORDS``             5,000,000    workload 1's records
``UNALIGNED_BENCH_REPEATS``             2            runs per contender (workload 1), rounds
                                                     (workload 4: 3 unless set)
``UNALIGNED_BENCH_SKEWED_RECORDS``      400,000      workloads 2 and 4 (hot partition: half;
                                                     workload 4's uniform input too)
``UNALIGNED_BENCH_START_INPUTS``        uniform,     workload 4's inputs
                                        skewed
``UNALIGNED_BENCH_SETUPS``              shipped,     workload 4's Spark set-ups (also
                                        opt-ins      ``bytecode``, ``daemon``: one opt-in;
                                                     :mod:`benchmarks.compare.opt_ins`)
``UNALIGNED_BENCH_STARTS``              new,restart  workload 4's starts
``UNALIGNED_BENCH_UDF_RECORDS``         200,000      workload 2's slow-UDF variant
``UNALIGNED_BENCH_KILL_RECORDS``        600,000      workload 3
``UNALIGNED_BENCH_KILL_EVERY_S``        20           workload 3's seconds between kills
``UNALIGNED_BENCH_KILL_FOR_S``          600          workload 3 stops killing after this
``UNALIGNED_BENCH_QUOTA``               (measured)   the throttle of workloads 2-4, bytes/s
``UNALIGNED_BENCH_LATENCY_RATE``        10,000       workload 5's steady input, records/s
``UNALIGNED_BENCH_LATENCY_S``           60           workload 5's seconds at that rate
``UNALIGNED_BENCH_LATENCY_WARMUP_S``    10           workload 5's first seconds, left out
``UNALIGNED_BENCH_TINY_RATE``           80           workload 5's tiny batches, records/s
``UNALIGNED_BENCH_TINY_S``              20           workload 5's seconds of tiny batches
``UNALIGNED_BENCH_SPARK_CONF``          (none)       more Spark settings for every session,
                                                     ``key=value`` pairs split by commas (an
                                                     opt-in such as
                                                     ``spark.python.daemon.module=...``)
======================================  ===========  ======================================

Every query process imports the package with bytecode, as an installed package has it
(:func:`benchmarks.compare.opt_ins.compile_installed_package`). The throttle is a fifth of ours'
unthrottled Kafka -> Kafka rate (in payload bytes): workload 1's
best, or, when workload 1 does not run, one ours run over ``UNALIGNED_BENCH_RECORDS`` records.

The machine is shared (2 cores here): figures of one machine at one time, never a gate.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS_DIR, write_results
from benchmarks.compare import (
    backpressure,
    connectors,
    driver_kills,
    figures,
    inputs,
    latency,
    opt_ins,
    recovery,
    table,
    throughput,
)
from benchmarks.floor_source import register as register_floor_source
from benchmarks.peer_connector import ensure_connector

WARMUP_RECORDS = 80_000
WORKLOADS = ("throughput", "backpressure", "driver_kills", "recovery", "latency")


def selected_workloads(raw: str) -> list[str]:
    """``UNALIGNED_BENCH_WORKLOADS``: comma-separated numbers (1-5) or names; empty: all."""
    chosen = set()
    for item in (x.strip() for x in raw.split(",") if x.strip()):
        if item.isdigit() and 1 <= int(item) <= len(WORKLOADS):
            chosen.add(WORKLOADS[int(item) - 1])
        elif item.replace("-", "_") in WORKLOADS:
            chosen.add(item.replace("-", "_"))
        else:
            raise SystemExit(
                f"unknown workload {item!r}: 1-{len(WORKLOADS)} or one of {', '.join(WORKLOADS)}"
            )
    return [w for w in WORKLOADS if w in chosen] or list(WORKLOADS)


def _names(
    variable: str, allowed: tuple[str, ...], default: tuple[str, ...] | None = None
) -> list[str]:
    """Comma-separated names of ``allowed`` from ``variable`` (empty: ``default``, else all)."""
    names = [x.strip() for x in os.environ.get(variable, "").split(",") if x.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SystemExit(f"{variable}: unknown {', '.join(unknown)}; one of {', '.join(allowed)}")
    return names or list(allowed if default is None else default)


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


def main() -> dict[str, Any]:
    inputs.prepare_process()
    opt_ins.compile_installed_package()
    from unaligned.testing import EmbeddedKafka

    connector = ensure_connector()
    workloads = selected_workloads(os.environ.get("UNALIGNED_BENCH_WORKLOADS", ""))
    records = inputs.env_ints("UNALIGNED_BENCH_RECORDS", (5_000_000,))[0]
    repeats = inputs.env_ints("UNALIGNED_BENCH_REPEATS", (2,))[0]
    start_rounds = inputs.env_ints("UNALIGNED_BENCH_REPEATS", (3,))[0]
    start_inputs = _names("UNALIGNED_BENCH_START_INPUTS", tuple(recovery.INPUTS))
    setup_names = _names("UNALIGNED_BENCH_SETUPS", opt_ins.SETUPS, ("shipped", "opt-ins"))
    starts = [
        recovery.STARTS[("new", "restart").index(name)]
        for name in _names("UNALIGNED_BENCH_STARTS", ("new", "restart"))
    ]
    skewed = inputs.env_ints("UNALIGNED_BENCH_SKEWED_RECORDS", (400_000,))[0]
    udf_records = inputs.env_ints("UNALIGNED_BENCH_UDF_RECORDS", (200_000,))[0]
    kill_records = inputs.env_ints("UNALIGNED_BENCH_KILL_RECORDS", (600_000,))[0]
    kill_every_s = inputs.env_ints("UNALIGNED_BENCH_KILL_EVERY_S", (20,))[0]
    kill_for_s = inputs.env_ints("UNALIGNED_BENCH_KILL_FOR_S", (600,))[0]
    quota = inputs.env_ints("UNALIGNED_BENCH_QUOTA", (0,))[0]
    latency_settings = latency.Settings(
        rate=inputs.env_ints("UNALIGNED_BENCH_LATENCY_RATE", (10_000,))[0],
        seconds=inputs.env_ints("UNALIGNED_BENCH_LATENCY_S", (60,))[0],
        warmup_s=inputs.env_ints("UNALIGNED_BENCH_LATENCY_WARMUP_S", (10,))[0],
        tiny_rate=inputs.env_ints("UNALIGNED_BENCH_TINY_RATE", (80,))[0],
        tiny_seconds=inputs.env_ints("UNALIGNED_BENCH_TINY_S", (20,))[0],
    )
    print(f"workloads: {', '.join(workloads)}", flush=True)
    started = time.monotonic()
    report: dict[str, Any] = {"benchmark": "compare", "workloads": workloads}
    jars = connector.spark_jars()
    with (
        tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        work = Path(tmp)
        spark = connectors.spark_session("bench-compare", jars)
        register_floor_source(spark)
        try:
            report["machine"] = inputs.machine_info(spark, connector)
            report["spark_master"] = spark.sparkContext.master
            if {"throughput", "backpressure", "recovery"} & set(workloads) or (
                not quota and "driver_kills" in workloads
            ):
                _warm_up(spark, kafka, work)  # workload 4: the broker's transaction log too
            if "throughput" in workloads:
                report["throughput"] = throughput.run(spark, kafka, work, records, repeats)
            if "latency" in workloads:
                report["latency"] = latency.run(spark, kafka, work, latency_settings)
            if not quota and {"backpressure", "driver_kills", "recovery"} & set(workloads):
                if "throughput" in report:
                    rate = report["throughput"]["outputs"]["kafka"]["best_records_per_s"]["ours"]
                else:
                    rate = throughput.ours_kafka_rate(spark, kafka, work, records)
                quota = int(rate * inputs.VALUE_BYTES / backpressure.THROTTLE_SHARE)
            if quota:
                report["quota_bytes_per_s"] = quota
            if "backpressure" in workloads:
                report["backpressure"] = backpressure.run(
                    spark, kafka, work, skewed, udf_records, quota
                )
        finally:
            spark.stop()
        if "driver_kills" in workloads:
            report["driver_kills"] = driver_kills.run(
                kafka, work, kill_records, quota, jars, kill_every_s, kill_for_s
            )
        if "recovery" in workloads:
            setups = opt_ins.setups(setup_names, work / "spark-home-opt-ins")
            report["recovery"] = recovery.run(
                kafka, work, skewed, quota, jars, start_rounds, (setups, starts), start_inputs
            )
    report["seconds"] = round(time.monotonic() - started)
    print("\n" + table.format_table(report))
    write_results("results", report)
    figures.draw_all(report, RESULTS_DIR)
    return report


if __name__ == "__main__":
    main()
