"""Workload 4: how long a restarted query takes to commit its first batch.

The throttled skewed input of workload 2 (``records``, default 400,000). Each variant's query
runs in a process of its own (:mod:`.query_process`) until its first batch is committed, is
SIGKILLed (driver, JVM and Python workers), and starts again on the same checkpoint; the figure
is the time from the restart to the next committed batch (Spark's ``commits/<N>``), JVM and
Spark start-up included. Variants: the peer; ours ``aligned`` (no channel state); ours
``unaligned`` with ``alignedCheckpointTimeout`` 1 s, whose first barrier cut and left channel
state pending, replayed first after the restart (its bytes are reported).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.compare import connectors, query_process
from benchmarks.compare.inputs import PARTITIONS, produce, skewed_counts

MAX_OFFSETS = 100_000
FIRST_COMMIT_LIMIT_S = 240.0
VARIANTS: dict[str, tuple[connectors.Connector, dict[str, str]]] = {
    "peer": (connectors.PEER, {}),
    "ours, no channel state": (connectors.OURS, {"checkpointMode": "aligned"}),
    "ours, with channel state": (connectors.OURS, {"alignedCheckpointTimeout": "1s"}),
}


def _pending_state_bytes(checkpoint: Path) -> int:
    from unaligned.barriers.metrics import read_metrics

    return sum(m.channel_state_bytes + m.inlined_bytes for m in read_metrics(str(checkpoint)))


def _variant(kafka: Any, work: Path, name: str, topic: str, jars: str) -> dict[str, Any]:
    connector, options = VARIANTS[name]
    output = f"recovery-out-{time.monotonic_ns()}"
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = work / f"checkpoint-{output}"
    config = {
        "connector": connector.name,
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "output": f"kafka:{output}",
        "checkpoint": str(checkpoint),
        "max_offsets": MAX_OFFSETS,
        "sink_options": options,
        "jars": jars if connector.format == "kafka" else "",
    }
    with open(work / f"recovery-{output}.log", "w") as log:
        first = query_process.start(config, log)
        if query_process.wait_for_commit(checkpoint, -1, first, FIRST_COMMIT_LIMIT_S) is None:
            query_process.kill(first)
            raise RuntimeError(f"{name}: no first commit; see {log.name}")
        query_process.kill(first)
        last = max(query_process.committed_batches(checkpoint))
        pending = _pending_state_bytes(checkpoint) if connector.exactly_once else 0
        restarted = query_process.start(config, log)
        seconds = query_process.wait_for_commit(checkpoint, last, restarted, FIRST_COMMIT_LIMIT_S)
        query_process.kill(restarted)
    kafka.delete_topic(output)
    if seconds is None:
        raise RuntimeError(f"{name}: no commit after the restart; see {log.name}")
    return {"restart_to_first_commit_s": round(seconds, 2), "channel_state_bytes_at_kill": pending}


def run(kafka: Any, work: Path, records: int, quota: int, jars: str) -> dict[str, Any]:
    """Workload 4 (module docstring); returns its figures and prints each variant's."""
    topic = f"recovery-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, topic, skewed_counts(records))
    print(f"workload 4: restart to the first committed batch ({records:,} records)", flush=True)
    results: dict[str, Any] = {}
    kafka.throttle_producers_together(quota)
    try:
        for name in VARIANTS:
            results[name] = _variant(kafka, work, name, topic, jars)
            r = results[name]
            print(
                f"  {name:<26} {r['restart_to_first_commit_s']:>6} s "
                f"(channel state at the kill: {r['channel_state_bytes_at_kill']:,} bytes)",
                flush=True,
            )
    finally:
        kafka.throttle_producers_together(None)
    kafka.delete_topic(topic)
    return {"records": records, "quota_bytes_per_s": quota, "variants": results}
