"""Throughput of the exactly-once sink, and what its commit step costs per micro-batch.

Run: ``python -m benchmarks.bench_sink`` (or ``python -m benchmarks sink``). Prints a table and
writes ``integration/benchmarks/results/sink.json``.

Setup: an :class:`~unaligned.testing.embedded_kafka.EmbeddedKafka` broker; 1,000,000 records
with 100-byte values (no key) in a topic with 8 partitions; Spark ``local[2]`` in this process.
Three queries read it with ``readStream.format("unaligned")`` and ``maxOffsetsPerTrigger=250000``
(4 batches, ``trigger(availableNow=True)``):

- ``noop``: to Spark's ``noop`` sink - what the source and Spark cost on their own (run first
  as ``noop-cold``, which also pays for starting the Python workers, and again last);
- ``kafka``: ``writeStream.format("unaligned")`` to an 8-partition topic (each record to the
  partition it came from), Kafka transactions;
- ``files``: ``writeStream.format("unaligned").option("path", ...)``, Parquet via pyarrow.

Records/s = records / sum of the batches' ``triggerExecution`` time (Spark's own progress
figures; query start-up excluded). ``commit_ms`` is the time the sink's driver-side
``commit()`` spent per batch until the batch was done (decision record, committing every
transaction / renaming every file, manifest), read from the done markers under the checkpoint.
Each query runs once: the figures are for one machine at one time, not a regression gate.

``python_cpu_s`` is the CPU time (user + system) the query cost in Spark's Python worker
processes (every live descendant whose command line names ``pyspark``, plus the processes they
reaped), read from ``/proc`` before and after the query; ``python_cpu_us_per_record`` divides it
by the records. The sink's own share is estimated as ``kafka`` minus the final (warm) ``noop``
query (``sink_python_cpu_s_per_million``): the source and Spark's Python overhead cancel out.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results
from unaligned.checkpoint import Checkpoint

RECORDS = 1_000_000
PARTITIONS = 8
VALUE_BYTES = 100
MAX_OFFSETS_PER_TRIGGER = 250_000


def _produce_input(kafka: Any, topic: str) -> float:
    started = time.monotonic()
    value = b"x" * (VALUE_BYTES - 8)
    kafka.produce(
        topic,
        ((i % PARTITIONS, None, b"%08d" % i + value, None, None) for i in range(RECORDS)),
    )
    return time.monotonic() - started


def _python_worker_cpu_s() -> float:
    """CPU seconds of every live pyspark process descended from this one and of the children
    they reaped (Linux ``/proc``; 0 elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[int, tuple[int, bool, int]] = {}  # pid -> (parent, pyspark, ticks)
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            pyspark = b"pyspark" in (entry / "cmdline").read_bytes()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        # ppid, and utime + stime + cutime + cstime
        found[int(entry.name)] = (int(fields[1]), pyspark, sum(int(f) for f in fields[11:15]))

    def ours(pid: int) -> bool:  # a descendant of this process (not another test's Spark)
        while pid > 1 and pid in found:
            pid = found[pid][0]
            if pid == os.getpid():
                return True
        return False

    return sum(t for pid, (_, py, t) in found.items() if py and ours(pid)) / ticks


def _run(spark: Any, kafka: Any, topic: str, target: str, work: Path) -> dict[str, Any]:
    from unaligned.sink.commit_log import CommitLog

    checkpoint = work / f"checkpoint-{target}"
    kind = target.split("-")[0]
    source = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
        .load()
        .select("value", "partition")
    )
    writer = source.writeStream.option("checkpointLocation", str(checkpoint))
    output: str = ""
    if kind == "noop":
        writer = writer.format("noop")
    elif kind == "kafka":
        output = f"bench-out-{int(time.time())}"
        kafka.create_topic(output, partitions=PARTITIONS)
        writer = (
            writer.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", output)
        )
    else:
        output = str(work / "files")
        writer = writer.format("unaligned").option("path", output)
    cpu_before = _python_worker_cpu_s()
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    wall_s = time.monotonic() - started
    python_cpu_s = _python_worker_cpu_s() - cpu_before
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    trigger_ms = [p["durationMs"]["triggerExecution"] for p in progress]
    result: dict[str, Any] = {
        "target": target,
        "records": rows,
        "batches": len(progress),
        "trigger_ms": trigger_ms,
        "wall_s": round(wall_s, 2),
        "records_per_s": round(rows / (sum(trigger_ms) / 1000)),
        "records_per_s_wall": round(rows / wall_s),
        "python_cpu_s": round(python_cpu_s, 2),
        "python_cpu_us_per_record": round(python_cpu_s / max(rows, 1) * 1e6, 2),
    }
    if kind != "noop":
        log = CommitLog(Checkpoint.resolve(str(checkpoint)))
        commit_ms = [
            float(info["commitMs"])
            for b in log.done_batch_ids()
            if (info := log.done_info(b)) is not None and "commitMs" in info
        ]
        result["commit_ms"] = commit_ms
        result["commit_ms_median"] = round(statistics.median(commit_ms), 1) if commit_ms else None
    if target == "kafka":
        end = kafka.end_offsets(output)
        stable = kafka.last_stable_offsets(output)
        # Every record, each once (a transaction marker takes one offset per partition per batch).
        result["output_end_offsets"] = sum(end.values())
        result["output_visible_check"] = stable == end
    elif target == "files":
        from unaligned.sink.files.committed_files import describe_committed

        result["committed"] = describe_committed(output)
    if rows != RECORDS:
        raise RuntimeError(f"{target}: the query read {rows} records, expected {RECORDS}")
    return result


def main() -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from unaligned.testing import EmbeddedKafka

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-sink-") as tmp, EmbeddedKafka() as kafka:
        work = Path(tmp)
        topic = "bench-in"
        kafka.create_topic(topic, partitions=PARTITIONS)
        produce_s = _produce_input(kafka, topic)
        spark = local_spark("bench-sink", **{"spark.driver.memory": "2g"})
        try:
            # The first query of a session also pays for starting Spark's Python workers: a
            # cold noop run absorbs that, and is reported separately.
            for target in ("noop-cold", "kafka", "files", "noop"):
                result = _run(spark, kafka, topic, target, work)
                results.append(result)
                print(
                    f"{target:>6}: {result['records_per_s']:>9,} records/s "
                    f"({result['batches']} batches, wall {result['wall_s']} s, Python CPU "
                    f"{result['python_cpu_s']} s"
                    + (
                        f", commit() median {result['commit_ms_median']} ms"
                        if "commit_ms" in result
                        else ""
                    )
                    + ")",
                    flush=True,
                )
        finally:
            spark.stop()
    cpu = {r["target"]: r["python_cpu_s"] for r in results}
    sink_cpu_per_million = (cpu["kafka"] - cpu["noop"]) * 1_000_000 / RECORDS
    print(f"sink's own Python CPU (kafka - noop): {sink_cpu_per_million:.1f} s per million records")
    summary = {
        "benchmark": "sink",
        "sink_python_cpu_s_per_million": round(sink_cpu_per_million, 2),
        "records": RECORDS,
        "partitions": PARTITIONS,
        "value_bytes": VALUE_BYTES,
        "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER,
        "input_produce_s": round(produce_s, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_at_end": os.getloadavg(),
        "results": results,
    }
    write_results("sink", summary)
    return summary


if __name__ == "__main__":
    main()
