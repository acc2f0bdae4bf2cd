"""Workload 4: how long a restarted query takes to commit its first batch.

The skewed input of workload 2 (``records``, default 400,000). Each variant's query runs in a
process of its own (:mod:`.query_process`) with the output throttled as in workload 2 until a
batch is committed (for the variant with channel state: a batch whose commit left channel state
pending), is SIGKILLed (driver, JVM and Python workers) right then, and starts again on the same
checkpoint with the throttle lifted, so that the figures are the restart's and not the slow
output's. From the restart: seconds until its Spark session is up (JVM and Spark start-up),
until ``start()`` returned, and until the next batch is committed (Spark's ``commits/<N>``; ours'
sink recovers before that batch is planned, and the batch replays the pending channel state
first). Variants: the peer; ours ``aligned`` (no channel state); ours ``unaligned`` with
``alignedCheckpointTimeout`` 1 s, with the rows and bytes pending at the kill (from
:func:`unaligned.inspection.checkpoint_view.build_view`); the floor, a Python source and sink
that do no work (:func:`.query_process.floor_to_floor`): the restart of any Python Data Source
pipeline, Spark's Python processes and nothing else. The variants take turns, ``repeats``
rounds; the figures per variant are the medians, and each round's first commit over the peer's
in that round.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.compare import connectors, query_process
from benchmarks.compare.inputs import PARTITIONS, produce, skewed_counts
from benchmarks.floor_source import FORMAT as FLOOR_FORMAT
from unaligned.checkpoint import Checkpoint

MAX_OFFSETS = 100_000
LIMIT_S = 240.0
FLOOR = connectors.Connector("floor", FLOOR_FORMAT)
FLOOR_RECORDS = 1000 * MAX_OFFSETS
"""Rows of the floor's input: more than it reads before the kill and the first commit after."""
VARIANTS: dict[str, tuple[connectors.Connector, dict[str, str]]] = {
    "peer": (connectors.PEER, {}),
    "ours, no channel state": (connectors.OURS, {"checkpointMode": "aligned"}),
    "ours, with channel state": (connectors.OURS, {"alignedCheckpointTimeout": "1s"}),
    "floor (no-op source, sink)": (FLOOR, {}),
}
WITH_STATE = "ours, with channel state"


def _pending(checkpoint: Path) -> tuple[int, int]:
    """Rows and bytes of channel state pending after the newest commit record."""
    from unaligned.inspection.checkpoint_view import build_view

    pending = build_view(Checkpoint.resolve(str(checkpoint))).pending
    if pending is None:
        return 0, 0
    return pending.rows, sum(t.bytes for t in pending.tasks)


def _kill_after_commit(config: dict[str, Any], checkpoint: Path, name: str, log: Any) -> int:
    """Run until a batch commits (with channel state pending, for :data:`WITH_STATE`), kill;
    returns the newest committed batch."""
    proc = query_process.start(config, log)
    after = -1
    try:
        while True:
            if query_process.wait_for_batch(checkpoint, after, proc, LIMIT_S, "commits") is None:
                raise RuntimeError(f"{name}: no commit to kill after; see {log.name}")
            after = max(query_process.logged_batches(checkpoint))
            if name != WITH_STATE or _pending(checkpoint)[0] > 0:
                return after
    finally:
        query_process.kill(proc)


def _variant(
    kafka: Any, work: Path, name: str, topic: str, quota: int, jars: str
) -> dict[str, Any]:
    connector, options = VARIANTS[name]
    output = f"recovery-out-{time.monotonic_ns()}"
    checkpoint = work / f"checkpoint-{output}"
    if connector is FLOOR:
        config = query_process.floor_to_floor(checkpoint, MAX_OFFSETS, FLOOR_RECORDS)
    else:
        kafka.create_topic(output, partitions=PARTITIONS)
        config = query_process.kafka_to_kafka(
            connector,
            kafka.bootstrap_servers,
            topic,
            output,
            checkpoint,
            MAX_OFFSETS,
            options,
            jars,
        )
    with open(work / f"{output}.log", "w") as log:
        kafka.throttle_producers_together(quota)
        try:
            last = _kill_after_commit(config, checkpoint, name, log)
        finally:
            kafka.throttle_producers_together(None)
        rows, state_bytes = _pending(checkpoint) if connector.exactly_once else (0, 0)
        events = work / f"{output}.events"
        config["events"] = str(events)
        started = time.time()
        restarted = query_process.start(config, log)
        try:
            seconds = query_process.wait_for_batch(checkpoint, last, restarted, LIMIT_S, "commits")
        finally:
            query_process.kill(restarted)
    if connector is not FLOOR:
        kafka.delete_topic(output)
    if seconds is None:
        raise RuntimeError(f"{name}: no commit after the restart; see {log.name}")
    marks = query_process.read_events(events)
    return {
        "restart_to_session_s": round(marks["session"] - started, 2),
        "restart_to_query_started_s": round(marks["started"] - started, 2),
        "restart_to_first_commit_s": round(seconds, 2),
        "pending_rows_at_kill": rows,
        "pending_bytes_at_kill": state_bytes,
    }


def over_peer(seconds: list[float], peer: list[float]) -> list[float]:
    """Each round's seconds over the peer's in the same round (the variants take turns)."""
    return [round(s / p, 2) for s, p in zip(seconds, peer, strict=True)]


def run(
    kafka: Any, work: Path, records: int, quota: int, jars: str, repeats: int
) -> dict[str, Any]:
    """Workload 4 (module docstring); returns its figures and prints each run."""
    topic = f"recovery-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, topic, skewed_counts(records))
    print(f"workload 4: restart to the first committed batch ({records:,} records)", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for _ in range(repeats):
        for name in VARIANTS:
            r = _variant(kafka, work, name, topic, quota, jars)
            runs[name].append(r)
            print(
                f"  {name:<26} session after {r['restart_to_session_s']:>6} s, start() after "
                f"{r['restart_to_query_started_s']:>6} s, committed after "
                f"{r['restart_to_first_commit_s']:>6} s (pending at the kill: "
                f"{r['pending_rows_at_kill']:,} rows, {r['pending_bytes_at_kill']:,} bytes)",
                flush=True,
            )
    kafka.delete_topic(topic)
    peer = [r["restart_to_first_commit_s"] for r in runs["peer"]]
    variants = {
        name: {
            "contender": VARIANTS[name][0].name,
            "first_commit_over_peer_per_round": over_peer(
                [r["restart_to_first_commit_s"] for r in rs], peer
            ),
            **{
                key: statistics.median(r[key] for r in rs)
                for key in (
                    "restart_to_session_s",
                    "restart_to_query_started_s",
                    "restart_to_first_commit_s",
                )
            },
            "runs": rs,
        }
        for name, rs in runs.items()
    }
    return {
        "records": records,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "quota_bytes_per_s": quota,
        "repeats": repeats,
        "variants": variants,
    }
