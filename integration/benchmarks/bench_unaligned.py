"""Aligned vs unaligned barriers of the exactly-once Kafka sink.

Run: ``python -m benchmarks unaligned`` (or ``python -m benchmarks.bench_unaligned``). Prints
the figures and writes ``integration/benchmarks/results/unaligned.json``.

Setup: one :class:`~unaligned.testing.embedded_kafka.EmbeddedKafka` broker, Spark ``local[2]``
in this process. Every query is Kafka -> ``readStream.format("unaligned")`` ->
``writeStream.format("unaligned")`` -> Kafka, writing the ``partition`` column so each record
keeps its partition number in an 8-partition output topic, ``trigger(availableNow=True)``. A
small warm-up query to Spark's ``noop`` sink runs first so that no measured query pays for
starting the Python workers.

1. ``throttled``: 8,000 records of 1,000 bytes in 8 partitions, 4,000 of them in partition 0
   (the hot partition), the rest spread over partitions 1..7. The broker's default client quota
   ``producer_byte_rate`` is set to ``THROTTLE_BYTES_PER_S`` while the sink writes. Each sink
   producer has its own client id (``producer-<transactional id>``, Kafka's default), so the
   quota applies per task: writing the hot partition's 4 MB takes more than 13 s. One input
   batch (``maxOffsetsPerTrigger`` covers the whole input); sink options ``chunkRows=200``,
   ``maxUnacknowledgedBytes=131072``. Run once with ``checkpointMode=aligned`` and once with
   ``checkpointMode=unaligned``, ``alignedCheckpointTimeout=2s``. Batch durations come from the
   sink's per-barrier metrics (``BarrierMetrics.duration_ms``: commit time minus the
   driver-fixed batch start) and from Spark's progress (``durationMs.triggerExecution``);
   channel-state bytes per batch are ``channel_state_bytes + inlined_bytes`` of each barrier.
   Exactly-once is checked by reading the output back with read_committed: every partition must
   hold exactly its input, in order.
2. ``throughput``: no throttle; ``THROUGHPUT_RECORDS`` records of 100 bytes over 8 partitions,
   ``maxOffsetsPerTrigger=250000``, default sink options, once per mode, unaligned first (with the
   default 30 s timeout: the cost of being ready to cut). Records/s = records / sum of the
   batches' ``triggerExecution``, as in ``bench_sink``, also without the first batch.
   Exactly-once: read_committed count and every record's sequence number seen once.
   ``UNALIGNED_BENCH_THROUGHPUT_RECORDS`` overrides the record count (this machine's sink does
   about 20k records/s).

Each query runs once: figures for one machine at one time, not a regression gate.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results
from unaligned.checkpoint import Checkpoint

PARTITIONS = 8

# Part 1: throttled, one hot partition.
THROTTLED_RECORDS = 8_000
HOT_RECORDS = 4_000
THROTTLED_VALUE_BYTES = 1_000
THROTTLE_BYTES_PER_S = 300_000
ALIGNED_CHECKPOINT_TIMEOUT = "2s"
THROTTLED_SINK_OPTIONS = {"chunkRows": "200", "maxUnacknowledgedBytes": "131072"}

# Part 2: throughput without throttle.
DEFAULT_THROUGHPUT_RECORDS = 1_000_000
THROUGHPUT_VALUE_BYTES = 100
THROUGHPUT_MAX_OFFSETS = 250_000
THROUGHPUT_RECORDS_ENV = "UNALIGNED_BENCH_THROUGHPUT_RECORDS"

MODES = ("aligned", "unaligned")
# A first run (aligned first) had its first throughput batch ~10 s slower than every other
# batch of either mode; the throughput part runs unaligned first so that any such first-query
# cost falls on the mode under test, and reports records/s without the first batch as well.
THROUGHPUT_ORDER = ("unaligned", "aligned")


def _throttled_input(kafka: Any, topic: str) -> dict[int, list[bytes]]:
    """Produce the skewed input; returns the expected values per partition, in order."""
    cold = THROTTLED_RECORDS - HOT_RECORDS
    counts = {0: HOT_RECORDS}
    for partition in range(1, PARTITIONS):
        counts[partition] = cold // (PARTITIONS - 1) + (
            1 if partition <= cold % (PARTITIONS - 1) else 0
        )
    expected: dict[int, list[bytes]] = {}
    records = []
    for partition, count in counts.items():
        values = [
            f"p{partition}-{i:06d}-".encode().ljust(THROTTLED_VALUE_BYTES, b"x")
            for i in range(count)
        ]
        expected[partition] = values
        records += [(partition, f"k{i % 7}".encode(), v, None, None) for i, v in enumerate(values)]
    kafka.produce(topic, records)
    return expected


def _throughput_input(kafka: Any, topic: str, records: int) -> float:
    started = time.monotonic()
    padding = b"x" * (THROUGHPUT_VALUE_BYTES - 8)
    kafka.produce(
        topic, ((i % PARTITIONS, None, b"%08d" % i + padding, None, None) for i in range(records))
    )
    return time.monotonic() - started


def _run_query(
    spark: Any,
    kafka: Any,
    input_topic: str,
    checkpoint: Path,
    max_offsets: int,
    output_topic: str | None,
    sink_options: Mapping[str, str],
) -> tuple[list[dict[str, Any]], float]:
    """Run one availableNow query to its end; ``output_topic=None`` writes to ``noop``.
    Returns Spark's progress of every batch and the wall time in seconds."""
    source = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
        .select("key", "value", "partition")
    )
    writer = source.writeStream.option("checkpointLocation", str(checkpoint))
    if output_topic is None:
        writer = writer.format("noop")
    else:
        writer = (
            writer.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", output_topic)
        )
        for key, value in sink_options.items():
            writer = writer.option(key, value)
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return list(query.recentProgress), time.monotonic() - started


def _batch_table(checkpoint: Path, progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per barrier the sink committed, joined with Spark's progress by batch id."""
    from unaligned.barriers.metrics import read_metrics

    trigger_ms = {
        int(p["batchId"]): int(p["durationMs"].get("triggerExecution", 0)) for p in progress
    }
    input_rows = {int(p["batchId"]): int(p["numInputRows"]) for p in progress}
    rows = []
    for m in read_metrics(Checkpoint.resolve(str(checkpoint))):
        rows.append(
            {
                "batch_id": m.batch_id,
                "input_rows": input_rows.get(m.batch_id),
                "sink_duration_ms": m.duration_ms,
                "trigger_ms": trigger_ms.get(m.batch_id),
                "mode": m.mode,
                "tasks_cut": m.tasks_cut,
                "rows_written": m.rows_written,
                "rows_replayed": m.rows_replayed,
                "rows_carried": m.rows_carried,
                "rows_spilled": m.rows_spilled,
                "channel_state_bytes": m.channel_state_bytes + m.inlined_bytes,
                "channel_state_files": m.channel_state_files,
            }
        )
    return rows


def _p50(values: list[int]) -> float | None:
    return float(statistics.median(values)) if values else None


def _check_in_order(kafka: Any, output: str, expected: dict[int, list[bytes]]) -> dict[str, Any]:
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        got[record.partition].append(record.value)
    differing = [p for p, values in expected.items() if got.get(p, []) != values]
    extra = [p for p in got if p not in expected and got[p]]
    stable = kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    return {
        "records_read_committed": sum(len(v) for v in got.values()),
        "records_expected": sum(len(v) for v in expected.values()),
        "partitions_differing": sorted(differing + extra),
        "no_open_transaction": stable,
        "exactly_once_in_order": not differing and not extra and stable,
    }


def _check_count(kafka: Any, output: str, records: int) -> dict[str, Any]:
    seen = bytearray(records)
    count = duplicates = unknown = 0
    for record in kafka.consume_all(output, read_committed=True):
        count += 1
        index = int(record.value[:8])
        if not 0 <= index < records:
            unknown += 1
        elif seen[index]:
            duplicates += 1
        else:
            seen[index] = 1
    missing = records - sum(seen)
    stable = kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    return {
        "records_read_committed": count,
        "records_expected": records,
        "duplicates": duplicates,
        "missing": missing,
        "unknown": unknown,
        "no_open_transaction": stable,
        "exactly_once": count == records
        and not duplicates
        and not missing
        and not unknown
        and stable,
    }


def _throttled_mode(spark: Any, kafka: Any, topic: str, mode: str, work: Path) -> dict[str, Any]:
    output = f"bench-ua-throttled-{mode}-{int(time.time())}"
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = work / f"checkpoint-throttled-{mode}"
    options = {**THROTTLED_SINK_OPTIONS, "checkpointMode": mode}
    if mode == "unaligned":
        options["alignedCheckpointTimeout"] = ALIGNED_CHECKPOINT_TIMEOUT
    progress, wall_s = _run_query(
        spark, kafka, topic, checkpoint, THROTTLED_RECORDS * 10, output, options
    )
    batches = _batch_table(checkpoint, progress)
    working = [b for b in batches if b["rows_written"] or b["rows_spilled"] or b["rows_carried"]]
    sink_ms = [b["sink_duration_ms"] for b in working]
    trigger_ms = [b["trigger_ms"] for b in working if b["trigger_ms"] is not None]
    state = [b["channel_state_bytes"] for b in batches]
    return {
        "mode": mode,
        "sink_options": options,
        "output_topic": output,
        "wall_s": round(wall_s, 2),
        "batches": len(batches),
        "batches_writing": len(working),
        "spark_batches": len(progress),
        "input_rows": sum(int(p["numInputRows"]) for p in progress),
        "sink_duration_ms_p50": _p50(sink_ms),
        "sink_duration_ms_max": max(sink_ms) if sink_ms else None,
        "trigger_ms_p50": _p50(trigger_ms),
        "trigger_ms_max": max(trigger_ms) if trigger_ms else None,
        "channel_state_bytes_mean": round(statistics.mean(state), 1) if state else None,
        "channel_state_bytes_max": max(state) if state else None,
        "channel_state_bytes_per_batch": state,
        "rows_written": sum(b["rows_written"] for b in batches),
        "rows_spilled": sum(b["rows_spilled"] for b in batches),
        "rows_replayed": sum(b["rows_replayed"] for b in batches),
        "rows_carried": sum(b["rows_carried"] for b in batches),
        "batches_cut": sum(1 for b in batches if b["mode"] == "unaligned"),
        "per_batch": batches,
    }


def _throughput_mode(
    spark: Any, kafka: Any, topic: str, records: int, mode: str, work: Path
) -> dict[str, Any]:
    output = f"bench-ua-throughput-{mode}-{int(time.time())}"
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = work / f"checkpoint-throughput-{mode}"
    options = {"checkpointMode": mode}
    progress, wall_s = _run_query(
        spark, kafka, topic, checkpoint, THROUGHPUT_MAX_OFFSETS, output, options
    )
    rows = sum(int(p["numInputRows"]) for p in progress)
    trigger_ms = [
        int(p["durationMs"]["triggerExecution"]) for p in progress if p["numInputRows"] > 0
    ]
    batches = _batch_table(checkpoint, progress)
    first = next((p for p in progress if p["numInputRows"] > 0), None)
    return {
        "mode": mode,
        "sink_options": options,
        "records": rows,
        "batches": len(batches),
        "trigger_ms": trigger_ms,
        "sink_duration_ms": [b["sink_duration_ms"] for b in batches],
        "batches_cut": sum(1 for b in batches if b["mode"] == "unaligned"),
        "rows_spilled": sum(b["rows_spilled"] for b in batches),
        "wall_s": round(wall_s, 2),
        "records_per_s": round(rows / (sum(trigger_ms) / 1000)) if trigger_ms else None,
        "records_per_s_wall": round(rows / wall_s),
        "records_per_s_after_first_batch": (
            round(
                sum(
                    int(p["numInputRows"])
                    for p in progress
                    if p["numInputRows"] > 0 and p is not first
                )
                / (sum(trigger_ms[1:]) / 1000)
            )
            if len(trigger_ms) > 1
            else None
        ),
        "output_topic": output,
    }


def _ratio(results: list[dict[str, Any]], key: str) -> float | None:
    by_mode = {r["mode"]: r[key] for r in results}
    if by_mode.get("aligned") and by_mode.get("unaligned"):
        return round(by_mode["unaligned"] / by_mode["aligned"], 3)
    return None


def _print_throttled(r: dict[str, Any]) -> None:
    print(
        f"  {r['mode']:>9}: batches {r['batches']} (writing {r['batches_writing']}), "
        f"sink duration p50 {r['sink_duration_ms_p50']} ms max {r['sink_duration_ms_max']} ms, "
        f"triggerExecution p50 {r['trigger_ms_p50']} ms max {r['trigger_ms_max']} ms, "
        f"wall {r['wall_s']} s",
        flush=True,
    )
    print(
        f"  {'':>9}  channel state bytes/batch mean {r['channel_state_bytes_mean']} max "
        f"{r['channel_state_bytes_max']} {r['channel_state_bytes_per_batch']}; rows spilled "
        f"{r['rows_spilled']} replayed {r['rows_replayed']} carried {r['rows_carried']}; "
        f"exactly-once in order: {r['check']['exactly_once_in_order']} "
        f"({r['check']['records_read_committed']}/{r['check']['records_expected']})",
        flush=True,
    )


def main() -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from unaligned.testing import EmbeddedKafka

    throughput_records = int(os.environ.get(THROUGHPUT_RECORDS_ENV, DEFAULT_THROUGHPUT_RECORDS))
    summary: dict[str, Any] = {
        "benchmark": "unaligned",
        "partitions": PARTITIONS,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_at_start": os.getloadavg(),
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-unaligned-") as tmp, EmbeddedKafka() as kafka:
        work = Path(tmp)
        os.environ.setdefault("UNALIGNED_IDLE_BARRIER_DIR", str(work / "idle-barriers"))
        throttled_topic = "bench-ua-throttled-in"
        kafka.create_topic(throttled_topic, partitions=PARTITIONS)
        expected = _throttled_input(kafka, throttled_topic)
        spark = local_spark(
            "bench-unaligned",
            **{
                "spark.sql.streaming.noDataMicroBatches.enabled": "false",
                "spark.driver.memory": "2g",
            },
        )
        try:
            # Warm-up: the first query of a session pays for starting Spark's Python workers.
            _, warm_s = _run_query(
                spark,
                kafka,
                throttled_topic,
                work / "checkpoint-warmup",
                THROTTLED_RECORDS * 10,
                None,
                {},
            )
            summary["warmup_noop_s"] = round(warm_s, 2)
            print(f"warm-up noop query: {warm_s:.1f} s", flush=True)

            # --- 1. throttled, one hot partition ---
            print(
                f"throttled: {THROTTLED_RECORDS} x {THROTTLED_VALUE_BYTES} B, {HOT_RECORDS} in "
                f"partition 0, producer_byte_rate {THROTTLE_BYTES_PER_S} B/s",
                flush=True,
            )
            throttled: list[dict[str, Any]] = []
            kafka.throttle_producers(THROTTLE_BYTES_PER_S)
            try:
                for mode in MODES:
                    throttled.append(_throttled_mode(spark, kafka, throttled_topic, mode, work))
            finally:
                kafka.throttle_producers(None)
            for result in throttled:
                result["check"] = _check_in_order(kafka, result["output_topic"], expected)
                _print_throttled(result)
            summary["throttled"] = {
                "records": THROTTLED_RECORDS,
                "hot_partition_records": HOT_RECORDS,
                "records_per_partition": {p: len(v) for p, v in expected.items()},
                "value_bytes": THROTTLED_VALUE_BYTES,
                "throttle_bytes_per_s": THROTTLE_BYTES_PER_S,
                "throttle_note": "default client quota producer_byte_rate, per sink producer "
                "(client id producer-<transactional id>)",
                "aligned_checkpoint_timeout": ALIGNED_CHECKPOINT_TIMEOUT,
                "results": throttled,
            }

            # --- 2. throughput without throttle ---
            throughput_topic = "bench-ua-throughput-in"
            kafka.create_topic(throughput_topic, partitions=PARTITIONS)
            produce_s = _throughput_input(kafka, throughput_topic, throughput_records)
            print(
                f"throughput: {throughput_records:,} x {THROUGHPUT_VALUE_BYTES} B "
                f"(input produced in {produce_s:.1f} s)",
                flush=True,
            )
            throughput: list[dict[str, Any]] = []
            for mode in THROUGHPUT_ORDER:
                result = _throughput_mode(
                    spark, kafka, throughput_topic, throughput_records, mode, work
                )
                result["check"] = _check_count(kafka, result["output_topic"], throughput_records)
                throughput.append(result)
                print(
                    f"  {mode:>9}: {result['records_per_s']:,} records/s "
                    f"({result['batches']} batches, "
                    f"trigger ms {result['trigger_ms']}, cut {result['batches_cut']}, wall "
                    f"{result['wall_s']} s, {result['records_per_s_wall']:,} records/s wall, "
                    f"{result['records_per_s_after_first_batch']:,} records/s "
                    "after the first batch); "
                    f"exactly-once: {result['check']['exactly_once']}",
                    flush=True,
                )
            ratio = _ratio(throughput, "records_per_s")
            ratio_steady = _ratio(throughput, "records_per_s_after_first_batch")
            print(
                f"  unaligned / aligned throughput: {ratio} "
                f"(after the first batch: {ratio_steady})",
                flush=True,
            )
            summary["throughput"] = {
                "records": throughput_records,
                "records_note": (
                    "full 1,000,000 records"
                    if throughput_records == DEFAULT_THROUGHPUT_RECORDS
                    else f"reduced to {throughput_records:,} records "
                    f"(set by {THROUGHPUT_RECORDS_ENV})"
                ),
                "value_bytes": THROUGHPUT_VALUE_BYTES,
                "max_offsets_per_trigger": THROUGHPUT_MAX_OFFSETS,
                "input_produce_s": round(produce_s, 1),
                "run_order": list(THROUGHPUT_ORDER),
                "unaligned_over_aligned": ratio,
                "unaligned_over_aligned_after_first_batch": ratio_steady,
                "results": throughput,
            }
        finally:
            spark.stop()
    summary["total_s"] = round(time.monotonic() - started, 1)
    summary["load_average_at_end"] = os.getloadavg()
    print(f"load average at end: {summary['load_average_at_end']}", flush=True)
    write_results("unaligned", summary)
    return summary


if __name__ == "__main__":
    main()
