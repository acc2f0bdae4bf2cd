"""Broker faults under a running query, ours against Spark's own Kafka connector, on one
three-node cluster (KRaft, Apache Kafka 4.4.0, replication 3, min.insync.replicas 2).

``./dev bench failover``. For each contender (``format("unaligned")`` -> the exactly-once Kafka
sink; Spark's ``format("kafka")`` -> ``format("kafka")``, at-least-once) and each schedule
(``kill``: each broker in turn SIGKILLed for 8 s, then the leader of input partition 0 frozen
for 30 s; ``rolling``: each broker in turn stopped by a controlled shutdown and started again,
waiting until it is back in sync), the same input of ``UNALIGNED_BENCH_FAILOVER_RECORDS``
records (default 60,000, 4 partitions) is read in batches of 1,000, one batch a second at
most, so the faults hit a busy query. Reported per run: records read back (kcat,
read_committed), duplicates, missing, open transactions of our sink, whether the query failed,
wall time, and the longest batch against the median one. Nothing asserts on the figures.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks import local_spark, write_results
from benchmarks.peer_connector import ensure_connector
from broker_chaos import (
    Chaos,
    Fault,
    batch_durations_ms,
    input_stream,
    run_until_caught_up,
    to_kafka,
)
from harness import kcat_read_committed
from unaligned.kafka.transactions import transaction_states
from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix
from unaligned.testing import EmbeddedKafka

PARTITIONS = 4
PER_TRIGGER = 1_000


def _schedules(source: str, topics: tuple[str, str]) -> dict[str, list[Fault]]:
    return {
        "kill": [
            *(Fault(str(node), "kill", down_s=8.0) for node in (1, 2, 3)),
            Fault(f"leader:{source}:0", "freeze", down_s=30.0),
        ],
        "rolling": [
            Fault(str(node), "stop", down_s=3.0, pause_s=2.0, wait_replicated=topics)
            for node in (1, 2, 3)
        ],
    }


def _run(
    spark: Any, kafka: EmbeddedKafka, contender: str, schedule: str, records: int, work: Path
) -> dict[str, Any]:
    source = f"in-{uuid.uuid4().hex[:8]}"
    output = f"out-{uuid.uuid4().hex[:8]}"
    for topic in (source, output):
        kafka.create_topic(topic, partitions=PARTITIONS)
    per_partition = records // PARTITIONS
    values = {p: [f"{p}:{i:07d}".encode() for i in range(per_partition)] for p in range(PARTITIONS)}
    kafka.produce(source, ((p, v, v, None, None) for p, vs in values.items() for v in vs))
    checkpoint = work / f"{contender}-{schedule}"
    started = time.monotonic()
    fmt = "unaligned" if contender == "ours" else "kafka"
    stream = input_stream(spark, kafka, source, PER_TRIGGER, fmt)
    query = to_kafka(stream, kafka, output, checkpoint, fmt)
    chaos = Chaos(kafka, _schedules(source, (source, output))[schedule]).start()
    failure = None
    try:
        run_until_caught_up(
            [query],
            [checkpoint],
            source,
            dict.fromkeys(range(PARTITIONS), per_partition),
            chaos,
            timeout_s=900,
        )
    except AssertionError as exc:
        failure = str(exc)[:500]
    wall_s = time.monotonic() - started
    durations = batch_durations_ms(query)
    query.stop()
    chaos.join(timeout_s=600)
    deadline = time.monotonic() + 60
    while kafka.last_stable_offsets(output) != kafka.end_offsets(output):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    read = [r["value"] for r in kcat_read_committed(kafka.bootstrap_servers, output)]
    counts = Counter(read)
    expected = {v.decode() for vs in values.values() for v in vs}
    open_ids = None
    if contender == "ours":
        query_id = json.loads((checkpoint / "metadata").read_text())["id"]
        prefix = default_transactional_id_prefix(query_id)
        open_ids = len(
            transaction_states.list_transactional_ids(
                {"bootstrap_servers": kafka.bootstrap_servers}, prefix
            )
        )
    return {
        "contender": contender,
        "schedule": schedule,
        "records": records,
        "read_back": len(read),
        "duplicates": sum(c - 1 for c in counts.values() if c > 1),
        "missing": len(expected - set(counts)),
        "open_transactions": open_ids,
        "query_failed": failure is not None,
        "failure": failure,
        "wall_s": round(wall_s, 1),
        "batches": len(durations),
        "longest_batch_ms": max(durations or [0]),
        "median_batch_ms": sorted(durations or [0])[len(durations or [0]) // 2],
        "faults": [
            {"action": s.fault.action, "node": s.node, "down_s": round(s.back_s - s.at_s, 1)}
            for s in chaos.struck
        ],
    }


def main() -> None:
    records = int(os.environ.get("UNALIGNED_BENCH_FAILOVER_RECORDS", "60000"))
    connector = ensure_connector()
    spark = local_spark(
        "bench-failover",
        **{
            "spark.jars": connector.spark_jars(),
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        },
    )
    runs = []
    with (
        TemporaryDirectory(prefix="bench-failover-") as tmp,
        EmbeddedKafka(brokers=3, data_dir=Path(tmp) / "cluster") as kafka,
    ):
        for schedule in ("kill", "rolling"):
            for contender in ("ours", "peer"):
                result = _run(spark, kafka, contender, schedule, records, Path(tmp))
                runs.append(result)
                print(
                    f"{schedule:8} {contender:5} read {result['read_back']:>7} "
                    f"dup {result['duplicates']:>5} missing {result['missing']:>5} "
                    f"open {result['open_transactions']} failed {result['query_failed']} "
                    f"wall {result['wall_s']:>6} s longest batch {result['longest_batch_ms']} ms "
                    f"(median {result['median_batch_ms']} ms)",
                    flush=True,
                )
    spark.stop()
    write_results(
        "failover",
        {"records": records, "per_trigger": PER_TRIGGER, "partitions": PARTITIONS, "runs": runs},
    )
