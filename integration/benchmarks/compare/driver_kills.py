"""Workload 3: progress while the driver is killed every ``kill_every_s`` seconds.

The input and throttle of workload 2 (a hot partition with half the records; all producers
share a fifth of ours' unthrottled rate), ``records`` (default 600,000) of them, batches of
``MAX_OFFSETS``. Each contender's query runs in a process of its own (:mod:`.query_process`);
``kill_every_s`` (default 20) seconds after each start its session is SIGKILLed (driver, JVM and
Python workers) and a new process starts on the same checkpoint. Kills stop once a run ends by
itself with the input consumed, or after ``kill_for_s`` (default 600): the run then in progress
goes on to the end, so every contender finishes and its output can be checked whole.

A read_committed consumer in this process counts the output's records as they become visible,
sampled every second: committed records over time, the kills marked. At the end, once the
consumer has reached the output's last stable offsets, the output is checked against the input
(:func:`benchmarks.compare.inputs.check_values`): ours must hold every input value exactly once;
for the peer (at-least-once) the duplicates are counted, and reported.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from benchmarks.compare import connectors, query_process
from benchmarks.compare.inputs import PARTITIONS, check_values, produce, skewed_counts
from kafka import KafkaConsumer, TopicPartition

KILL_EVERY_S = 20.0
KILL_FOR_S = 600.0
FINISH_LIMIT_S = 600.0
"""Seconds the last (unkilled) run may take before the workload gives up."""
MAX_OFFSETS = 50_000


class CommittedCounter:
    """Reads ``topic`` with read_committed in a thread: every value, and (seconds since
    :attr:`started`, values so far) once a second."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap, self._topic = bootstrap, topic
        self.values: list[bytes] = []
        self.samples: list[tuple[float, int]] = []
        self.positions: dict[int, int] = {}
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommittedCounter:
        self.started = time.monotonic()
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
        partitions = [TopicPartition(self._topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        next_sample = 0.0
        try:
            while not self._stop.is_set():
                for records in consumer.poll(timeout_ms=200).values():
                    self.values.extend(r.value for r in records)
                self.positions = {tp.partition: consumer.position(tp) for tp in partitions}
                now = time.monotonic() - self.started
                if now >= next_sample:
                    self.samples.append((round(now, 1), len(self.values)))
                    next_sample += 1.0
        finally:
            consumer.close()

    def wait_until_read(self, offsets: Mapping[int, int], limit_s: float = 60.0) -> bool:
        """Wait until the consumer is at or past ``offsets`` (the output's last stable
        offsets) in every partition; ``False`` if ``limit_s`` passed first."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            positions = self.positions
            if all(positions.get(p, 0) >= end for p, end in offsets.items()):
                self.samples.append((round(time.monotonic() - self.started, 1), len(self.values)))
                return True
            time.sleep(0.2)
        return False


def _run_with_kills(
    config: dict[str, Any], log: TextIO, t0: float, kill_every_s: float, kill_for_s: float
) -> tuple[list[float], float]:
    """Start, kill and restart the query until a run ends by itself; returns the kill times and
    the time the last run ended, in seconds since ``t0``."""
    kills: list[float] = []
    while True:
        killing = time.monotonic() - t0 < kill_for_s
        proc = query_process.start(config, log)
        try:
            proc.wait(timeout=kill_every_s if killing else FINISH_LIMIT_S)
        except subprocess.TimeoutExpired:
            query_process.kill(proc)
            if not killing:
                name = config["connector"]
                raise RuntimeError(
                    f"{name}: no end in {FINISH_LIMIT_S:.0f} s; see {log.name}"
                ) from None
            kills.append(round(time.monotonic() - t0, 1))
            continue
        if proc.returncode != 0:
            raise RuntimeError(f"{config['connector']} run failed: see {log.name}")
        return kills, round(time.monotonic() - t0, 1)


def _contender(
    kafka: Any,
    work: Path,
    connector: connectors.Connector,
    topic: str,
    counts: Mapping[int, int],
    jars: str,
    kill_every_s: float,
    kill_for_s: float,
) -> dict[str, Any]:
    output = f"kills-out-{connector.name}-{time.monotonic_ns()}"
    kafka.create_topic(output, partitions=PARTITIONS)
    config = query_process.kafka_to_kafka(
        connector,
        kafka.bootstrap_servers,
        topic,
        output,
        work / f"checkpoint-{output}",
        MAX_OFFSETS,
        {"alignedCheckpointTimeout": "5s"},
        jars,
    )
    with (
        open(work / f"{output}.log", "w") as log,
        CommittedCounter(kafka.bootstrap_servers, output) as counter,
    ):
        kills, ended_s = _run_with_kills(config, log, counter.started, kill_every_s, kill_for_s)
        if not counter.wait_until_read(kafka.last_stable_offsets(output)):
            raise RuntimeError(f"{connector.name}: the output was not read to its end")
    kafka.delete_topic(output)
    check = check_values(counter.values, counts)
    result: dict[str, Any] = {
        "kills": len(kills),
        "kill_times_s": kills,
        "seconds_to_end": ended_s,
        "committed_over_time": counter.samples,
        **check,
    }
    if connector.exactly_once:
        result["exactly_once"] = check["records"] == check["distinct"] == sum(counts.values())
    return result


def run(
    kafka: Any,
    work: Path,
    records: int,
    quota: int,
    jars: str,
    kill_every_s: float = KILL_EVERY_S,
    kill_for_s: float = KILL_FOR_S,
) -> dict[str, Any]:
    """Workload 3 (module docstring); returns its figures and prints each contender's."""
    topic = f"kills-{records}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    counts = skewed_counts(records)
    produce(kafka.bootstrap_servers, topic, counts)
    print(f"workload 3: {records:,} records, driver killed every {kill_every_s:.0f} s", flush=True)
    results: dict[str, Any] = {}
    kafka.throttle_producers_together(quota)
    try:
        for connector in (connectors.PEER, connectors.OURS):
            r = _contender(kafka, work, connector, topic, counts, jars, kill_every_s, kill_for_s)
            results[connector.name] = r
            print(
                f"  {connector.name:<6} {r['kills']} kills, ended after {r['seconds_to_end']} s; "
                f"{r['records']:,} records read back, duplicates {r['duplicates']:,}, "
                f"missing {r['missing']:,}",
                flush=True,
            )
    finally:
        kafka.throttle_producers_together(None)
    kafka.delete_topic(topic)
    return {
        "records": records,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "kill_every_s": kill_every_s,
        "kill_for_s": kill_for_s,
        "quota_bytes_per_s": quota,
        "contenders": results,
    }
