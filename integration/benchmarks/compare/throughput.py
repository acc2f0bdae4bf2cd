"""Workload 1: throughput, ours against Spark's connector (defaults and tuned).

``records`` (default 5,000,000) values of 100 bytes over 8 partitions, read from the earliest
offsets with ``maxOffsetsPerTrigger`` 250,000 under ``availableNow``, to three outputs: no-op
(Spark's ``noop`` sink: the source alone), Kafka (peer at-least-once, ours exactly-once), and
Parquet files (Spark's file sink, or our sink's file mode). For each output the contenders run
in turn (peer, peer-tuned, ours), ``repeats`` times, so noise hits all of them alike.

Records/s, two ways, each the best of a contender's runs: *wall* = records / time from
``start()`` to the end of ``awaitTermination()`` (query start-up and the planning between batches
included), *in batches* = records / the sum of the batches' ``durationMs.triggerExecution``.
Ratios ours/peer and ours/peer-tuned of both, and per repeat (``pair_ratios``: ours over
peer-tuned in the same round). On the no-op output a fourth contender runs, the floor source
(:mod:`benchmarks.floor_source`: a Python source that reads nothing and yields the same rows in
the same read tasks): ours/floor is what reading Kafka costs us. kcat reading the whole input
topic once (``kcat -C -e -o beginning``, output to ``/dev/null``) gives the practical limit of
a reader on this machine.

CPU per million records of each run (:mod:`benchmarks.proc_cpu`, from ``/proc``): Spark's Python
workers (ours and the floor: the read tasks and the source runner), the Spark JVM and the broker.

**Tiny batches.** Then every contender reads ``TINY_BATCHES`` batches of ``TINY_RECORDS`` records
(10 a partition) into the no-op sink: the median batch duration (``triggerExecution``, and its
``addBatch``) is what a batch costs whatever its size, the floor's included.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import proc_cpu
from benchmarks.compare import connectors
from benchmarks.compare.inputs import PARTITIONS, kcat_read_seconds, produce, uniform_counts
from benchmarks.compare.progress import percentile, rows_and_batch_seconds
from benchmarks.floor_source import FORMAT as FLOOR_FORMAT

MAX_OFFSETS = 250_000
TINY_RECORDS = 80
TINY_BATCHES = 40
OUTPUTS = ("noop", "kafka", "parquet")


def _one_query(
    spark: Any,
    kafka: Any,
    connector: connectors.Connector,
    output: str,
    topic: str,
    work: Path,
    max_offsets: int = MAX_OFFSETS,
) -> dict[str, Any]:
    tag = f"{output}-{connector.name}-{time.monotonic_ns()}"
    target = {"noop": "noop", "kafka": f"kafka:out-{tag}", "parquet": f"parquet:{work / tag}"}
    if output == "kafka":
        kafka.create_topic(f"out-{tag}", partitions=PARTITIONS)
    df = connectors.read_stream(spark, connector, kafka.bootstrap_servers, topic, max_offsets)
    writer = connectors.write_stream(
        df, connector, target[output], str(work / f"checkpoint-{tag}"), kafka.bootstrap_servers
    )
    run = proc_cpu.timed_query(writer, proc_cpu.spark_jvm_pid(kafka.broker_pid), kafka.broker_pid)
    wall_s, cpu = run.wall_s, run.cpu
    progress = run.query.recentProgress
    rows, batch_s = rows_and_batch_seconds(progress)
    if output == "kafka":
        written = sum(kafka.end_offsets(f"out-{tag}").values())
        kafka.delete_topic(f"out-{tag}")
        if written < rows:
            raise RuntimeError(f"{connector.name}: {written} offsets written for {rows} rows")
    shutil.rmtree(work / tag, ignore_errors=True)
    shutil.rmtree(work / f"checkpoint-{tag}", ignore_errors=True)
    per_million = 1_000_000 / rows if rows else 0.0
    return {
        "rows": rows,
        "batches": len(progress),
        "wall_s": round(wall_s, 2),
        "batch_s": round(batch_s, 2),
        "records_per_s": round(rows / wall_s),
        "records_per_s_in_batches": round(rows / batch_s),
        "cpu_s_per_million": {
            "python_workers": round(cpu.python_workers_s * per_million, 2),
            "spark_jvm": round(cpu.jvm_s * per_million, 2),
            "broker": round(cpu.broker_s * per_million, 2),
        },
        "batch_ms": [p["durationMs"]["triggerExecution"] for p in progress],
        "add_batch_ms": [p["durationMs"].get("addBatch", 0) for p in progress],
    }


def _median_cpu(results: list[dict[str, Any]]) -> dict[str, float]:
    keys = results[0]["cpu_s_per_million"]
    return {k: statistics.median(r["cpu_s_per_million"][k] for r in results) for k in keys}


def tiny_batches(spark: Any, kafka: Any, work: Path, floor_name: str) -> dict[str, Any]:
    """The per-batch fixed cost (module docstring): per contender, the median and p99 batch
    duration and the median ``addBatch``, ms, over ``TINY_BATCHES`` no-op batches."""
    topic = f"tiny-{time.monotonic_ns()}"
    records = TINY_RECORDS * TINY_BATCHES
    kafka.create_topic(topic, partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, topic, uniform_counts(records))
    floor = connectors.Connector("floor", floor_name, {"records": str(records)})
    figures: dict[str, Any] = {}
    for connector in (*connectors.ALL, floor):
        r = _one_query(spark, kafka, connector, "noop", topic, work, TINY_RECORDS)
        if r["rows"] != records:
            raise RuntimeError(f"{connector.name} read {r['rows']} of {records} tiny records")
        figures[connector.name] = {
            "batches": r["batches"],
            "batch_ms_p50": statistics.median(r["batch_ms"]),
            "batch_ms_p99": percentile(r["batch_ms"], 0.99),
            "add_batch_ms_p50": statistics.median(r["add_batch_ms"]),
        }
        print(
            f"  tiny batches {connector.name:<10} {r['batches']} batches, median "
            f"{figures[connector.name]['batch_ms_p50']} ms (addBatch "
            f"{figures[connector.name]['add_batch_ms_p50']} ms)",
            flush=True,
        )
    kafka.delete_topic(topic)
    return {"records_per_batch": TINY_RECORDS, "contenders": figures}


def run(spark: Any, kafka: Any, work: Path, records: int, repeats: int) -> dict[str, Any]:
    """Workload 1 (module docstring); returns its figures and prints each run."""
    topic = f"throughput-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    produce_s = produce(kafka.bootstrap_servers, topic, uniform_counts(records))
    kcat_s = kcat_read_seconds(kafka.bootstrap_servers, topic)
    print(
        f"workload 1: {records:,} records produced in {produce_s:.1f} s; kcat reads them in "
        f"{kcat_s:.1f} s ({records / kcat_s:,.0f} records/s)",
        flush=True,
    )
    floor = connectors.Connector("floor", FLOOR_FORMAT, {"records": str(records)})
    outputs: dict[str, Any] = {}
    for output in OUTPUTS:
        contenders = (*connectors.ALL, floor) if output == "noop" else connectors.ALL
        runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in contenders}
        for _ in range(repeats):
            for connector in contenders:
                result = _one_query(spark, kafka, connector, output, topic, work)
                if result["rows"] != records:
                    raise RuntimeError(f"{connector.name} read {result['rows']} of {records}")
                runs[connector.name].append(result)
                cpu = result["cpu_s_per_million"]
                print(
                    f"  {output:<8} {connector.name:<10} {result['records_per_s']:>9,} "
                    f"records/s wall ({result['wall_s']} s), "
                    f"{result['records_per_s_in_batches']:>9,} in {result['batches']} batches; "
                    f"CPU s/M: Python {cpu['python_workers']}, JVM {cpu['spark_jvm']}, "
                    f"broker {cpu['broker']}",
                    flush=True,
                )
                del result["batch_ms"], result["add_batch_ms"]
        floor_runs = runs.pop("floor", [])
        best = {name: max(r["records_per_s"] for r in rs) for name, rs in runs.items()}
        best_in = {n: max(r["records_per_s_in_batches"] for r in rs) for n, rs in runs.items()}
        pairs = [
            round(o["records_per_s"] / t["records_per_s"], 2)
            for o, t in zip(runs["ours"], runs["peer-tuned"], strict=True)
        ]
        outputs[output] = {
            "best_records_per_s": best,
            "best_records_per_s_in_batches": best_in,
            "ours_over_peer": round(best["ours"] / best["peer"], 2),
            "ours_over_peer_tuned": round(best["ours"] / best["peer-tuned"], 2),
            "ours_over_peer_in_batches": round(best_in["ours"] / best_in["peer"], 2),
            "ours_over_peer_tuned_in_batches": round(best_in["ours"] / best_in["peer-tuned"], 2),
            "pair_ratios_over_peer_tuned": pairs,
            "cpu_s_per_million_median": {n: _median_cpu(rs) for n, rs in runs.items()},
            "runs": runs,
        }
        if floor_runs:
            floor_best = max(r["records_per_s"] for r in floor_runs)
            floor_in = max(r["records_per_s_in_batches"] for r in floor_runs)
            outputs[output]["floor_source"] = {
                "best_records_per_s": floor_best,
                "best_records_per_s_in_batches": floor_in,
                "ours_over_floor": round(best["ours"] / floor_best, 2),
                "ours_over_floor_in_batches": round(best_in["ours"] / floor_in, 2),
                "cpu_s_per_million_median": _median_cpu(floor_runs),
                "runs": floor_runs,
            }
    kafka.delete_topic(topic)
    tiny = tiny_batches(spark, kafka, work, FLOOR_FORMAT)
    return {
        "records": records,
        "partitions": PARTITIONS,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "repeats": repeats,
        "kcat_read_records_per_s": round(records / kcat_s),
        "outputs": outputs,
        "tiny_batches": tiny,
    }


def ours_kafka_rate(spark: Any, kafka: Any, work: Path, records: int) -> int:
    """Ours' unthrottled Kafka -> Kafka records/s (wall) in one run over ``records`` records,
    the base of workloads 2-4's throttle when workload 1 does not run."""
    topic = f"rate-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, topic, uniform_counts(records))
    result = _one_query(spark, kafka, connectors.OURS, "kafka", topic, work)
    kafka.delete_topic(topic)
    print(f"ours, Kafka -> Kafka unthrottled: {result['records_per_s']:,} records/s", flush=True)
    return int(result["records_per_s"])
