"""What a layout drain costs with nothing pending: a restart with another ``readTasks``.

Run: ``python -m benchmarks rescaling``. Prints the figures and writes
``integration/benchmarks/results/rescaling.json``.

Setup: one :class:`~unaligned.testing.embedded_kafka.EmbeddedKafka` broker, Spark ``local[2]`` in
this process; Kafka -> ``format("unaligned")`` -> exactly-once Kafka sink,
``trigger(availableNow=True)``, ``maxOffsetsPerTrigger=2000``, 8 partitions of 100-byte records.
A first run with ``readTasks=2`` reads 8,000 records; 8,000 more are produced; the restart then
runs with ``readTasks=2`` again (``same``) or ``readTasks=4`` (``rescaled``: its first batch is the
layout drain, which reads nothing and, with nothing pending, writes nothing). Figures:

- ``restart_s``: the restart's ``start()`` to the end of its last batch;
- ``drain_ms`` (rescaled only): the layout drain's ``triggerExecution``;
- ``batch_ms``: the median ``triggerExecution`` of the restart's batches that read records.

Reported as ratios: ``rescaled`` restart over ``same`` restart, and the drain over a batch of
2,000 records of the same run. Every run checks exactly-once by reading the output back.
Each scenario runs ``REPEATS`` times; figures for one machine at one time, not a gate.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results

PARTITIONS = 8
RECORDS = 1000  # per partition and run
REPEATS = int(os.environ.get("UNALIGNED_BENCH_REPEATS", "3"))


def _produce(kafka: Any, topic: str, first: int) -> None:
    kafka.produce(
        topic,
        (
            (p, None, f"{p}:{first + i:07d}".encode().ljust(100, b"x"), None, None)
            for p in range(PARTITIONS)
            for i in range(RECORDS)
        ),
    )


def _run(spark: Any, kafka: Any, topic: str, output: str, checkpoint: str, tasks: int) -> Any:
    query = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "2000")
        .option("readTasks", str(tasks))
        .load()
        .select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def _scenario(spark: Any, kafka: Any, tmp: Path, name: str, after: int) -> dict[str, Any]:
    from unaligned.barriers.offset_log import read_offset_log
    from unaligned.checkpoint import Checkpoint

    topic, output = f"{name}-in", f"{name}-out"
    kafka.create_topic(topic, partitions=PARTITIONS)
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = str(tmp / name)
    _produce(kafka, topic, 0)
    _run(spark, kafka, topic, output, checkpoint, 2)
    _produce(kafka, topic, RECORDS)
    began = time.monotonic()
    query = _run(spark, kafka, topic, output, checkpoint, after)
    restart_s = time.monotonic() - began
    resolved = Checkpoint.resolve(checkpoint)
    drains = []
    durations = []
    for progress in query.recentProgress:
        entry = read_offset_log(resolved, progress["batchId"])
        ours = [s.offset for s in entry.sources if isinstance(s.offset, dict)]
        took = progress["durationMs"]["triggerExecution"]
        if ours and ours[0].get("layoutDrain"):
            drains.append(took)
        elif progress["numInputRows"]:
            durations.append(took)
    values = [r.value for r in kafka.consume_all(output, read_committed=True)]
    if len(values) != 2 * PARTITIONS * RECORDS or len(set(values)) != len(values):
        raise AssertionError(f"{name}: not every record exactly once")
    if (after != 2) != bool(drains):
        raise AssertionError(f"{name}: layout drains {drains} with readTasks 2 -> {after}")
    return {
        "restart_s": round(restart_s, 2),
        "drain_ms": drains[0] if drains else None,
        "batch_ms": statistics.median(durations),
        "batches": len(query.recentProgress),
    }


def main() -> dict[str, Any]:
    import pyspark

    from unaligned.testing import EmbeddedKafka

    results: dict[str, list[dict[str, Any]]] = {"same": [], "rescaled": []}
    with tempfile.TemporaryDirectory(prefix="bench-rescaling-") as tmp, EmbeddedKafka() as kafka:
        spark = local_spark("bench-rescaling")
        for repeat in range(REPEATS):
            for name, after in (("same", 2), ("rescaled", 4)):
                result = _scenario(spark, kafka, Path(tmp), f"{name}{repeat}", after)
                print(f"{name} #{repeat}: {result}", flush=True)
                results[name].append(result)
        spark.stop()
    same = statistics.median(r["restart_s"] for r in results["same"])
    rescaled = statistics.median(r["restart_s"] for r in results["rescaled"])
    drain_over_batch = statistics.median(r["drain_ms"] / r["batch_ms"] for r in results["rescaled"])
    report = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "pyspark": pyspark.__version__,
        },
        "runs": results,
        "median": {
            "restart_rescaled_over_same": round(rescaled / same, 2),
            "drain_over_a_2000_record_batch": round(drain_over_batch, 2),
        },
    }
    print("\nmedians:", report["median"])
    write_results("rescaling", report)
    return report


if __name__ == "__main__":
    main()
