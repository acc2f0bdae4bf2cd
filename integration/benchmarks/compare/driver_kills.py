"""Workload 3: progress while the driver is killed every ``KILL_EVERY_S`` seconds.

The input and throttle of workload 2 (a hot partition with half the records; all producers
share a fifth of ours' unthrottled rate), ``records`` (default 1,200,000) of them, so a query
needs about a minute. Each contender's query runs in a process of its own
(:mod:`.query_process`); every ``KILL_EVERY_S`` s its session is SIGKILLed (driver, JVM and
Python workers) and a new process starts on the same checkpoint, until a run ends by itself
with the input consumed (or ``LIMIT_S`` passes). A read_committed consumer counts the output's
records as they become visible, sampled every second: committed records over time. At the end
the output is read back: ours must hold every input value exactly once; for the peer
(at-least-once) the duplicates are counted.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.compare import connectors, query_process
from benchmarks.compare.inputs import PARTITIONS, produce, skewed_counts
from kafka import KafkaConsumer, TopicPartition

KILL_EVERY_S = 20.0
LIMIT_S = 300.0
MAX_OFFSETS = 50_000


class CommittedCounter:
    """Counts the records a read_committed consumer sees in ``topic``, in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap, self._topic = bootstrap, topic
        self.values: list[bytes] = []
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommittedCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self._bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        consumer.assign([TopicPartition(self._topic, p) for p in range(PARTITIONS)])
        started = time.monotonic()
        next_sample = 0.0
        try:
            while not self._stop.is_set():
                for records in consumer.poll(timeout_ms=200).values():
                    self.values.extend(r.value for r in records)
                now = time.monotonic() - started
                if now >= next_sample:
                    self.samples.append((round(now, 1), len(self.values)))
                    next_sample += 1.0
        finally:
            consumer.close()


def _run_with_kills(config: dict[str, Any], work: Path, kill_every_s: float) -> tuple[int, float]:
    """Kills and restarts the query until a run ends by itself; returns (kills, seconds)."""
    started = time.monotonic()
    kills = 0
    with open(work / f"{config['connector']}-kills.log", "w") as log:
        while time.monotonic() - started < LIMIT_S:
            proc = query_process.start(config, log)
            try:
                proc.wait(timeout=kill_every_s)
            except Exception:  # TimeoutExpired: still running
                query_process.kill(proc)
                kills += 1
                continue
            if proc.returncode != 0:
                raise RuntimeError(f"{config['connector']} run failed: see {log.name}")
            break
    return kills, time.monotonic() - started


def run(
    kafka: Any, work: Path, records: int, quota: int, jars: str, kill_every_s: float = KILL_EVERY_S
) -> dict[str, Any]:
    """Workload 3 (module docstring); returns its figures and prints each contender's."""
    topic = f"kills-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, topic, skewed_counts(records))
    print(f"workload 3: {records:,} records, driver killed every {kill_every_s:.0f} s", flush=True)
    results: dict[str, Any] = {}
    kafka.throttle_producers_together(quota)
    try:
        for connector in (connectors.PEER, connectors.OURS):
            output = f"kills-out-{connector.name}-{time.monotonic_ns()}"
            kafka.create_topic(output, partitions=PARTITIONS)
            config = {
                "connector": connector.name,
                "bootstrap": kafka.bootstrap_servers,
                "input_topic": topic,
                "output": f"kafka:{output}",
                "checkpoint": str(work / f"checkpoint-{output}"),
                "max_offsets": MAX_OFFSETS,
                "sink_options": {"alignedCheckpointTimeout": "5s"},
                "jars": jars if connector.format == "kafka" else "",
            }
            with CommittedCounter(kafka.bootstrap_servers, output) as counter:
                kills, seconds = _run_with_kills(config, work, kill_every_s)
                time.sleep(2)  # let the counter see the last commit
            distinct = len(set(counter.values))
            results[connector.name] = {
                "kills": kills,
                "seconds_to_end": round(seconds, 1),
                "committed_over_time": counter.samples,
                "records_seen": len(counter.values),
                "distinct_values": distinct,
                "duplicates": len(counter.values) - distinct,
                "missing": records - distinct,
            }
            if connector.exactly_once:
                results[connector.name]["exactly_once"] = len(counter.values) == distinct == records
            r = results[connector.name]
            print(
                f"  {connector.name:<6} {kills} kills, ended after {r['seconds_to_end']} s; "
                f"duplicates {r['duplicates']:,}, missing {r['missing']:,}",
                flush=True,
            )
            kafka.delete_topic(output)
    finally:
        kafka.throttle_producers_together(None)
    kafka.delete_topic(topic)
    return {
        "records": records,
        "kill_every_s": kill_every_s,
        "quota_bytes_per_s": quota,
        "contenders": results,
    }
