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
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.compare import connectors
from benchmarks.compare.inputs import PARTITIONS, kcat_read_seconds, produce, uniform_counts
from benchmarks.compare.progress import rows_and_batch_seconds
from benchmarks.floor_source import FORMAT as FLOOR_FORMAT

MAX_OFFSETS = 250_000
OUTPUTS = ("noop", "kafka", "parquet")


def _one_query(
    spark: Any, kafka: Any, connector: connectors.Connector, output: str, topic: str, work: Path
) -> dict[str, Any]:
    tag = f"{output}-{connector.name}-{time.monotonic_ns()}"
    target = {"noop": "noop", "kafka": f"kafka:out-{tag}", "parquet": f"parquet:{work / tag}"}
    if output == "kafka":
        kafka.create_topic(f"out-{tag}", partitions=PARTITIONS)
    df = connectors.read_stream(spark, connector, kafka.bootstrap_servers, topic, MAX_OFFSETS)
    writer = connectors.write_stream(
        df, connector, target[output], str(work / f"checkpoint-{tag}"), kafka.bootstrap_servers
    )
    started = time.monotonic()
    query = writer.start()
    query.awaitTermination()
    wall_s = time.monotonic() - started
    rows, batch_s = rows_and_batch_seconds(query.recentProgress)
    if output == "kafka":
        written = sum(kafka.end_offsets(f"out-{tag}").values())
        kafka.delete_topic(f"out-{tag}")
        if written < rows:
            raise RuntimeError(f"{connector.name}: {written} offsets written for {rows} rows")
    shutil.rmtree(work / tag, ignore_errors=True)
    shutil.rmtree(work / f"checkpoint-{tag}", ignore_errors=True)
    return {
        "rows": rows,
        "batches": len(query.recentProgress),
        "wall_s": round(wall_s, 2),
        "batch_s": round(batch_s, 2),
        "records_per_s": round(rows / wall_s),
        "records_per_s_in_batches": round(rows / batch_s),
    }


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
                print(
                    f"  {output:<8} {connector.name:<10} {result['records_per_s']:>9,} "
                    f"records/s wall ({result['wall_s']} s), "
                    f"{result['records_per_s_in_batches']:>9,} in {result['batches']} batches",
                    flush=True,
                )
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
                "runs": floor_runs,
            }
    kafka.delete_topic(topic)
    return {
        "records": records,
        "partitions": PARTITIONS,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "repeats": repeats,
        "kcat_read_records_per_s": round(records / kcat_s),
        "outputs": outputs,
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
