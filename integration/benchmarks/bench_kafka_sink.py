"""Our exactly-once Kafka sink against Spark's own ``format("kafka")`` sink, side by side.

Run: ``./dev bench kafka-sink`` (or ``python -m benchmarks kafka-sink`` from ``integration/``).
Prints a table and writes ``integration/benchmarks/results/kafka_sink.json``. Quick run:
``UNALIGNED_BENCH_RECORDS=200000`` (comma-separated sizes); ``UNALIGNED_BENCH_REPEATS`` sets how
many (peer, ours) pairs run per size (default 3).

Setup: one embedded broker (:class:`~unaligned.testing.EmbeddedKafka`) and one Spark session
(``local[N]``, N = CPU count, driver memory 2g) for the whole run, with Spark's Kafka connector
on ``spark.jars`` (fetched by Maven beforehand: :mod:`benchmarks.peer_connector`; pyspark 4.3's
own version is not published, so the newest 4.x is used). For each size (default 1,000,000 and
5,000,000 records of 100-byte values, no key, over 8 partitions, produced with ``kcat -P``), the
queries run alternately, peer, floor, ours, peer, floor, ours, so that noise from the machine
hits all alike:

- the source is the same for both: ``readStream.format("unaligned")``, ``startingOffsets
  earliest``, ``maxOffsetsPerTrigger`` 250,000, ``trigger(availableNow=True)``, columns
  ``value`` and ``partition`` (each record goes to the partition it came from);
- peer: ``writeStream.format("kafka")`` (at-least-once; its producer's defaults: kafka-clients
  with acks=all and idempotence);
- ours: ``writeStream.format("unaligned")`` with ``topic`` (exactly-once: one Kafka transaction
  per task, two-phase commit by the driver);
- floor: ``writeStream.format("bench-floor")`` (:mod:`benchmarks.floor_sink`), a Python sink
  that reads its input and writes nothing: the most any Python Data Source sink can reach here,
  since Spark hands every Python sink its rows the same way (JVM rows -> Arrow -> a Python worker
  per task). Ours minus the floor is our sink's own cost; the floor minus the peer is what being
  a Python sink costs before any writing;
- each query (but the floor's) writes a fresh 8-partition output topic (deleted after the query)
  and has a fresh checkpoint. Before the timed queries, one small query per sink warms up the JVM
  and the Python workers; it is not counted.

Measured per query: records/s = records / wall time from ``start()`` to the end of
``awaitTermination()`` (query start-up and the last commit included), and records / the sum of
the progress reports' ``durationMs.triggerExecution``; CPU seconds per million records of the
Python processes below the Spark JVM (Python workers and the data source's driver-side
processes), of the Spark JVM itself, and of the broker (:mod:`benchmarks.proc_cpu`'s
``CpuWatch``, polled while the query runs). Also the share of the machine's CPU that was busy
during the query, and the CPU seconds other processes took meanwhile (other people's work on a
shared machine: noise). The output's end offsets are checked: every record is there (ours also
has one transaction marker per partition per batch, and read_committed sees everything).
The machine is shared (2 cores here): the figures are one machine at one time, not a gate.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.compare.connectors import spark_session
from benchmarks.compare.inputs import (
    PARTITIONS,
    VALUE_BYTES,
    env_ints,
    machine_info,
    prepare_process,
    produce,
    uniform_counts,
)
from benchmarks.floor_sink import FORMAT as FLOOR_FORMAT
from benchmarks.floor_sink import register as register_floor_sink
from benchmarks.peer_connector import ensure_connector
from benchmarks.proc_cpu import spark_jvm_pid, timed_query

SIZES = (1_000_000, 5_000_000)
MAX_OFFSETS_PER_TRIGGER = 250_000
WARMUP_RECORDS = 80_000
SINKS = ("peer", "floor", "ours")
_FORMATS = {"peer": "kafka", "floor": FLOOR_FORMAT, "ours": "unaligned"}


def run_query(
    spark: Any, kafka: Any, jvm_pid: int, sink: str, source_topic: str, output: str, work: Path
) -> dict[str, Any]:
    """One query from ``source_topic`` to a new topic ``output`` through ``sink`` (the floor
    writes nothing: no topic)."""
    records = sum(kafka.end_offsets(source_topic).values())
    writes = sink != "floor"
    if writes:
        kafka.create_topic(output, partitions=PARTITIONS)
    bootstrap = kafka.bootstrap_servers
    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
        .load()
        .select("value", "partition")
    )
    writer = df.writeStream.format(_FORMATS[sink])
    writer = (
        writer.option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output)
        .option("checkpointLocation", str(work / f"checkpoint-{output}"))
        .trigger(availableNow=True)
    )
    run = timed_query(writer, jvm_pid, kafka.broker_pid)
    wall_s, cpu = run.wall_s, run.cpu
    progress = run.query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    trigger_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    if rows != records:
        raise RuntimeError(f"{sink}: the query read {rows} records, expected {records}")
    written, visible = records, True
    if writes:
        end = kafka.end_offsets(output)
        written = sum(end.values())
        if written < records:
            raise RuntimeError(f"{sink}: {written} offsets in {output}, expected >= {records}")
        visible = kafka.last_stable_offsets(output) == end
        kafka.delete_topic(output)
    per_million = 1e6 / records
    return {
        "sink": sink,
        "records": records,
        "batches": sum(1 for p in progress if p["numInputRows"] > 0),
        "wall_s": round(wall_s, 2),
        "trigger_execution_s": round(trigger_s, 2),
        "records_per_s_wall": round(records / wall_s),
        "records_per_s_in_batches": round(records / trigger_s),
        "python_workers_cpu_s_per_million": round(cpu.python_workers_s * per_million, 2),
        "python_processes_at_end": cpu.python_processes,
        "spark_jvm_cpu_s_per_million": round(cpu.jvm_s * per_million, 2),
        "broker_cpu_s_per_million": round(cpu.broker_s * per_million, 2),
        "driver_python_cpu_s_per_million": round(cpu.driver_s * per_million, 2),
        "machine_busy_cpu_share": round(cpu.machine_busy_s / (wall_s * (os.cpu_count() or 1)), 3),
        "other_processes_cpu_s": round(max(0.0, cpu.machine_busy_s - cpu.ours_s()), 2),
        "output_offsets_beyond_records": written - records,
        "output_all_committed": visible,
    }


def pair_ratios(runs: list[dict[str, Any]], over: str = "peer") -> list[float]:
    """ours/``over`` records/s (wall) of each round of runs, in run order: the machine's noise
    hits the runs of a round alike, so their spread shows how far one ratio can be trusted."""
    base = [r["records_per_s_wall"] for r in runs if r["sink"] == over]
    ours = [r["records_per_s_wall"] for r in runs if r["sink"] == "ours"]
    return [round(o / b, 3) for b, o in zip(base, ours, strict=True)]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Best and mean records/s, and mean CPU per million, for one sink at one size."""

    def mean(key: str) -> float:
        return round(statistics.fmean(run[key] for run in runs), 2)

    return {
        "best_records_per_s_wall": max(run["records_per_s_wall"] for run in runs),
        "best_records_per_s_in_batches": max(run["records_per_s_in_batches"] for run in runs),
        "mean_records_per_s_wall": round(mean("records_per_s_wall")),
        "mean_records_per_s_in_batches": round(mean("records_per_s_in_batches")),
        "python_workers_cpu_s_per_million": mean("python_workers_cpu_s_per_million"),
        "spark_jvm_cpu_s_per_million": mean("spark_jvm_cpu_s_per_million"),
        "broker_cpu_s_per_million": mean("broker_cpu_s_per_million"),
    }


def _print_table(sizes: list[dict[str, Any]]) -> None:
    head = f"{'records':>10} {'sink':<5} {'rec/s wall':>11} {'rec/s batches':>14}"
    print(head + f" {'py CPU s/M':>11} {'JVM CPU s/M':>12} {'broker s/M':>11}")
    for size in sizes:
        for sink in SINKS:
            s = size[sink]
            print(
                f"{size['records']:>10,} {sink:<5} {s['best_records_per_s_wall']:>11,}"
                f" {s['best_records_per_s_in_batches']:>14,}"
                f" {s['python_workers_cpu_s_per_million']:>11.2f}"
                f" {s['spark_jvm_cpu_s_per_million']:>12.2f}"
                f" {s['broker_cpu_s_per_million']:>11.2f}"
            )
        pairs = size["pair_ratios_wall"]
        print(
            f"{'':>10} ours/peer: {size['ratio_ours_over_peer_wall']:.2f} (wall), "
            f"{size['ratio_ours_over_peer_in_batches']:.2f} (in batches); per pair "
            f"{', '.join(f'{r:.2f}' for r in pairs)}, median {statistics.median(pairs):.2f}"
        )
        floor_pairs = size["pair_ratios_over_floor_wall"]
        print(
            f"{'':>10} ours/floor: {size['ratio_ours_over_floor_wall']:.2f} (wall); per round "
            f"{', '.join(f'{r:.2f}' for r in floor_pairs)}; our sink's own Python CPU "
            f"(ours - floor): {size['sink_own_python_cpu_s_per_million']:.2f} s/M"
        )
    print("records/s: best of the runs; CPU s/M: CPU seconds per million records, mean of the runs")


def main() -> dict[str, Any]:
    prepare_process()
    from unaligned.testing import EmbeddedKafka

    connector = ensure_connector()
    sizes = [n - n % PARTITIONS for n in env_ints("UNALIGNED_BENCH_RECORDS", SIZES)]
    repeats = env_ints("UNALIGNED_BENCH_REPEATS", (3,))[0]
    cores = os.cpu_count() or 2
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-kafka-sink-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        work = Path(tmp)
        spark = spark_session("bench-kafka-sink", connector.spark_jars())
        register_floor_sink(spark)
        try:
            jvm_pid = spark_jvm_pid(kafka.broker_pid)
            machine = machine_info(spark, connector)
            print(f"machine: {machine}", flush=True)
            load_at_start = os.getloadavg()
            kafka.create_topic("warmup", partitions=PARTITIONS)
            produce(kafka.bootstrap_servers, "warmup", uniform_counts(WARMUP_RECORDS))
            for sink in SINKS:  # JIT, Python workers, producers: not counted
                run_query(spark, kafka, jvm_pid, sink, "warmup", f"warmup-{sink}", work)
            for records in sizes:
                topic = f"in-{records}"
                kafka.create_topic(topic, partitions=PARTITIONS)
                produce_s = produce(kafka.bootstrap_servers, topic, uniform_counts(records))
                print(f"produced {records:,} records in {produce_s:.1f} s", flush=True)
                runs: list[dict[str, Any]] = []
                for i in range(repeats):
                    for sink in SINKS:
                        out = f"out-{records}-{sink}-{i}"
                        run = run_query(spark, kafka, jvm_pid, sink, topic, out, work)
                        runs.append(run)
                        print(
                            f"  {sink:<4} run {i}: {run['records_per_s_wall']:>9,} records/s wall,"
                            f" {run['records_per_s_in_batches']:>9,} in batches"
                            f" ({run['batches']} batches, {run['wall_s']} s), Python CPU"
                            f" {run['python_workers_cpu_s_per_million']} s/M, other processes"
                            f" {run['other_processes_cpu_s']} CPU s",
                            flush=True,
                        )
                kafka.delete_topic(topic)
                peer = summarise([r for r in runs if r["sink"] == "peer"])
                floor = summarise([r for r in runs if r["sink"] == "floor"])
                ours = summarise([r for r in runs if r["sink"] == "ours"])
                results.append(
                    {
                        "records": records,
                        "input_produce_s": round(produce_s, 1),
                        "peer": peer,
                        "ours": ours,
                        "ratio_ours_over_peer_wall": round(
                            ours["best_records_per_s_wall"] / peer["best_records_per_s_wall"], 3
                        ),
                        "ratio_ours_over_peer_in_batches": round(
                            ours["best_records_per_s_in_batches"]
                            / peer["best_records_per_s_in_batches"],
                            3,
                        ),
                        "pair_ratios_wall": pair_ratios(runs),
                        "floor": floor,
                        "ratio_ours_over_floor_wall": round(
                            ours["best_records_per_s_wall"] / floor["best_records_per_s_wall"], 3
                        ),
                        "pair_ratios_over_floor_wall": pair_ratios(runs, over="floor"),
                        "sink_own_python_cpu_s_per_million": round(
                            ours["python_workers_cpu_s_per_million"]
                            - floor["python_workers_cpu_s_per_million"],
                            2,
                        ),
                        "runs": runs,
                    }
                )
        finally:
            spark.stop()
    _print_table(results)
    report = {
        "benchmark": "kafka_sink",
        "partitions": PARTITIONS,
        "value_bytes": VALUE_BYTES,
        "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER,
        "spark_master": f"local[{cores}]",
        "repeats": repeats,
        "machine": machine,
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
        "sizes": results,
    }
    write_results("kafka_sink", report)
    return report


if __name__ == "__main__":
    main()
