"""Workload 2: backpressure and skew, and a slow UDF.

**Throttled output.** ``records`` (default 400,000) values of 100 bytes in 8 partitions, half of
them in partition 0 (the hot partition), ``maxOffsetsPerTrigger`` 100,000. While each query runs,
every producer shares one quota, ``producer_byte_rate`` = a fifth of ours' unthrottled Kafka
sink rate in payload bytes (from workload 1; the broker's default *user* quota, so the peer's one
producer per executor and our one producer per task get the same total). Contenders: the peer
(at-least-once), ours ``aligned`` (every row written before the batch commits, like the peer),
ours ``unaligned`` with ``alignedCheckpointTimeout`` 1 s and 5 s. Per query: the batch durations
(Spark's ``durationMs.triggerExecution`` of every batch: p50, p99, max), the time from
``start()`` to the first committed batch, and for ours the channel-state bytes each barrier
stored (files and inline). Ours' output is read back with read_committed: every value once.

**Slow UDF.** ``udf_records`` (default 200,000) values, skewed the same way, no throttle, a
``mapInArrow`` step that sleeps 0.2 ms per row, to the ``noop`` sink: the hot partition's task
makes a batch of 100,000 take about 10 s, and no barrier can overtake rows that a transformation
has not produced yet. The peer with ``maxOffsetsPerTrigger`` 100,000 against ours with
``targetBatchDuration`` 2 s as well (batches sized from the measured rate); the same figures per
batch, and the rows each batch read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmarks.compare import connectors
from benchmarks.compare.inputs import (
    PARTITIONS,
    check_values,
    produce,
    skewed_counts,
)
from benchmarks.compare.progress import batch_figures
from unaligned.checkpoint import Checkpoint

MAX_OFFSETS = 100_000
THROTTLE_SHARE = 5
VARIANTS: dict[str, tuple[connectors.Connector, dict[str, str]]] = {
    "peer": (connectors.PEER, {}),
    "ours aligned": (connectors.OURS, {"checkpointMode": "aligned"}),
    "ours unaligned 1s": (connectors.OURS, {"alignedCheckpointTimeout": "1s"}),
    "ours unaligned 5s": (connectors.OURS, {"alignedCheckpointTimeout": "5s"}),
}
UDF_SECONDS_PER_ROW = 0.0002
TARGET_BATCH_DURATION = "2s"


def _channel_state_bytes(checkpoint: Path) -> list[int]:
    from unaligned.barriers.metrics import read_metrics

    return [
        m.channel_state_bytes + m.inlined_bytes
        for m in read_metrics(Checkpoint.resolve(str(checkpoint)))
    ]


def _throttled_query(
    spark: Any, kafka: Any, name: str, topic: str, counts: Mapping[int, int], quota: int, work: Path
) -> dict[str, Any]:
    connector, options = VARIANTS[name]
    tag = name.replace(" ", "-")
    output = f"bp-out-{tag}-{time.monotonic_ns()}"
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = work / f"checkpoint-{output}"
    df = connectors.read_stream(spark, connector, kafka.bootstrap_servers, topic, MAX_OFFSETS)
    writer = connectors.write_stream(
        df, connector, f"kafka:{output}", str(checkpoint), kafka.bootstrap_servers, options
    )
    kafka.throttle_producers_together(quota)
    try:
        started = time.time()
        query = writer.start()
        query.awaitTermination()
        wall_s = time.time() - started
    finally:
        kafka.throttle_producers_together(None)
    result = {"wall_s": round(wall_s, 2), **batch_figures(query.recentProgress, started)}
    if connector.exactly_once:
        result["channel_state_bytes_per_batch"] = _channel_state_bytes(checkpoint)
        values = (r.value for r in kafka.consume_all(output, read_committed=True))
        check = check_values(values, counts)
        result["exactly_once"] = check["records"] == check["distinct"] == sum(counts.values())
    kafka.delete_topic(output)
    return result


def _slow_rows(batches: Iterator[Any]) -> Iterator[Any]:
    for batch in batches:
        time.sleep(batch.num_rows * UDF_SECONDS_PER_ROW)
        yield batch


def _udf_query(
    spark: Any, kafka: Any, connector: connectors.Connector, topic: str, work: Path
) -> dict[str, Any]:
    extra = {} if connector.format == "kafka" else {"targetBatchDuration": TARGET_BATCH_DURATION}
    df = connectors.read_stream(
        spark, connector, kafka.bootstrap_servers, topic, MAX_OFFSETS, **extra
    )
    slow = df.mapInArrow(_slow_rows, df.schema)
    checkpoint = work / f"checkpoint-udf-{connector.name}-{time.monotonic_ns()}"
    writer = connectors.write_stream(slow, connector, "noop", str(checkpoint), "")
    started = time.time()
    query = writer.start()
    query.awaitTermination()
    return batch_figures(query.recentProgress, started)


def run(
    spark: Any,
    kafka: Any,
    work: Path,
    records: int,
    udf_records: int,
    quota: int,
) -> dict[str, Any]:
    """Workload 2 (module docstring) under a throttle of ``quota`` bytes/s for all producers
    together; returns its figures and prints each query."""
    topic = f"skewed-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    counts = skewed_counts(records)
    produce(kafka.bootstrap_servers, topic, counts)
    print(
        f"workload 2: {records:,} records, {counts[0]:,} in partition 0; quota {quota:,} B/s "
        "for all producers together",
        flush=True,
    )
    throttled: dict[str, Any] = {}
    for name in VARIANTS:
        throttled[name] = _throttled_query(spark, kafka, name, topic, counts, quota, work)
        _print(name, throttled[name])
    udf_topic = f"udf-{udf_records}"
    kafka.create_topic(udf_topic, partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, udf_topic, skewed_counts(udf_records))
    slow_udf: dict[str, Any] = {}
    for connector in (connectors.PEER, connectors.OURS):
        slow_udf[connector.name] = _udf_query(spark, kafka, connector, udf_topic, work)
        _print(f"slow UDF {connector.name}", slow_udf[connector.name])
    kafka.delete_topic(topic)
    kafka.delete_topic(udf_topic)
    return {
        "records": records,
        "hot_partition_records": counts[0],
        "max_offsets_per_trigger": MAX_OFFSETS,
        "quota_bytes_per_s": quota,
        "throttled": throttled,
        "slow_udf": {
            "records": udf_records,
            "seconds_per_row": UDF_SECONDS_PER_ROW,
            "target_batch_duration": TARGET_BATCH_DURATION,
            "runs": slow_udf,
        },
    }


def _print(name: str, figures: Mapping[str, Any]) -> None:
    p50, p99, top = (figures[f"duration_ms_{k}"] for k in ("p50", "p99", "max"))
    print(
        f"  {name:<20} batches {figures['batches']:>3}, duration p50 {p50:>7,.0f} p99 "
        f"{p99:>7,} max {top:>7,} ms, first commit {figures['first_commit_s']} s",
        flush=True,
    )
