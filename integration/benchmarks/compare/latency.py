"""Workload 5: end-to-end latency at a steady input rate, and the fixed cost of a batch.

**Steady input.** A producer (one ``kcat -P``, fed by this process every 10 ms) writes ``rate``
records/s (default 10,000) for ``seconds`` (default 60) to an 8-partition topic; each value
carries the epoch milliseconds at which it was handed to kcat. The query (the benchmark's Spark
session) reads the topic with the default trigger (the next batch as soon as the previous one
ended; no ``maxOffsetsPerTrigger``) and writes ``value`` to Kafka. An independent
``read_committed`` consumer (``kcat -C``, ``fetch.wait.max.ms`` 5) stamps each output record
when it arrives: its visible latency is that time minus the time in its value. Records produced
in the first ``warmup_s`` seconds (default 10) are left out of the figures. Contenders: the peer
(at-least-once: a record is visible once its batch wrote it), ours aligned and ours unaligned
(exactly-once: visible when the batch's transactions commit; unaligned with the defaults).

**Tiny batches.** Then the producer slows to ``tiny_rate`` (default 80 records/s: a few
records per partition per batch) for ``tiny_seconds`` (default 20): the median duration of
those batches (Spark's ``triggerExecution``, and its ``addBatch`` part) is the fixed cost of a
batch, what every batch pays whatever its size.
"""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.compare import connectors
from benchmarks.compare.inputs import PARTITIONS, VALUE_BYTES
from benchmarks.compare.progress import epoch_s, percentile

VARIANTS: dict[str, tuple[connectors.Connector, dict[str, str]]] = {
    "peer": (connectors.PEER, {}),
    "ours aligned": (connectors.OURS, {"checkpointMode": "aligned"}),
    "ours unaligned": (connectors.OURS, {}),
}
TICK_S = 0.01
DRAIN_S = 60.0


@dataclass(frozen=True)
class Settings:
    """The workload's sizes (environment knobs of :mod:`benchmarks.bench_compare`)."""

    rate: int = 10_000
    seconds: int = 60
    warmup_s: int = 10
    tiny_rate: int = 80
    tiny_seconds: int = 20


def encode(sequence: int, produced_ms: int) -> bytes:
    """A value: ``<sequence>-<epoch ms>``, padded with ``.`` to the benchmark's value size."""
    return f"{sequence}-{produced_ms}".encode().ljust(VALUE_BYTES, b".")


def decode(value: bytes) -> tuple[int, int]:
    """(sequence, produced epoch ms) of a value made by :func:`encode`."""
    sequence, _, produced = value.rstrip(b".\n").partition(b"-")
    return int(sequence), int(produced)


def latency_figures(
    produced_ms: Mapping[int, int], seen_ms: Mapping[int, int], from_ms: int
) -> dict[str, Any]:
    """Latency figures of the records produced at or after ``from_ms``: how many were produced
    and seen, and the p50, p99 and max of (seen - produced) in ms over those seen."""
    counted = [s for s, at in produced_ms.items() if at >= from_ms]
    latencies = [seen_ms[s] - produced_ms[s] for s in counted if s in seen_ms]
    figures: dict[str, Any] = {"produced": len(counted), "seen": len(latencies)}
    if latencies:
        figures.update(
            latency_ms_p50=percentile(latencies, 0.5),
            latency_ms_p99=percentile(latencies, 0.99),
            latency_ms_max=max(latencies),
        )
    return figures


def fixed_cost_figures(progress: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median and p99 batch duration (``triggerExecution``), median ``addBatch`` and rows."""
    if not progress:
        return {"batches": 0}
    total = [p["durationMs"]["triggerExecution"] for p in progress]
    add = [p["durationMs"].get("addBatch", 0) for p in progress]
    return {
        "batches": len(progress),
        "batch_ms_p50": statistics.median(total),
        "batch_ms_p99": percentile(total, 0.99),
        "add_batch_ms_p50": statistics.median(add),
        "rows_per_batch_p50": statistics.median(p["numInputRows"] for p in progress),
    }


@dataclass
class _Producer:
    """Feeds one ``kcat -P`` at a steady rate; remembers when each sequence was handed over."""

    bootstrap: str
    topic: str
    produced_ms: dict[int, int] = field(default_factory=dict)
    _next: int = 0

    def run(self, rate: int, seconds: float) -> None:
        command = ["kcat", "-P", "-b", self.bootstrap, "-t", self.topic, "-z", "none"]
        command += ["-X", "linger.ms=5"]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE)
        assert proc.stdin is not None
        started = time.monotonic()
        sent = 0
        try:
            while (elapsed := time.monotonic() - started) < seconds:
                due = int(elapsed * rate) - sent
                if due > 0:
                    now_ms = int(time.time() * 1000)
                    lines = []
                    for _ in range(due):
                        self.produced_ms[self._next] = now_ms
                        lines.append(encode(self._next, now_ms))
                        self._next += 1
                    proc.stdin.write(b"\n".join(lines) + b"\n")
                    proc.stdin.flush()
                    sent += due
                time.sleep(TICK_S)
        finally:
            proc.stdin.close()
            if proc.wait(timeout=60) != 0:
                raise RuntimeError(f"kcat -P exited with {proc.returncode}")


class _Consumer:
    """``kcat -C`` read_committed on the output; stamps each record as its line arrives."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        command = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-u", "-q"]
        command += ["-X", "isolation.level=read_committed", "-X", "fetch.wait.max.ms=5"]
        command += ["-f", "%s\n"]
        self.seen_ms: dict[int, int] = {}
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        self._thread = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            at = int(time.time() * 1000)
            if line.strip():
                self.seen_ms.setdefault(decode(line)[0], at)

    def wait_for(self, sequences: int, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while len(self.seen_ms) < sequences and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=30)
        self._thread.join(timeout=30)


def _start_query(spark: Any, name: str, bootstrap: str, topic: str, output: str, work: Path) -> Any:
    connector, options = VARIANTS[name]
    reader = (
        spark.readStream.format(connector.format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    writer = (
        reader.load()
        .select("value")
        .writeStream.format(connector.format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output)
        .option("checkpointLocation", str(work / f"checkpoint-{output}"))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.start()  # the default trigger


def _wait_for_a_batch(query: Any, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not query.recentProgress and time.monotonic() < deadline:
        time.sleep(0.1)


def _wait_until_idle(query: Any, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)


def _variant(spark: Any, kafka: Any, name: str, settings: Settings, work: Path) -> dict[str, Any]:
    tag = f"{name.replace(' ', '-')}-{time.monotonic_ns()}"
    topic, output = f"latency-in-{tag}", f"latency-out-{tag}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    kafka.create_topic(output, partitions=PARTITIONS)
    bootstrap = kafka.bootstrap_servers
    consumer = _Consumer(bootstrap, output)
    query = _start_query(spark, name, bootstrap, topic, output, work)
    try:
        _wait_for_a_batch(query, 120.0)
        producer = _Producer(bootstrap, topic)
        steady_from_ms = int(time.time() * 1000) + settings.warmup_s * 1000
        producer.run(settings.rate, settings.seconds)
        steady = dict(producer.produced_ms)
        consumer.wait_for(len(steady), DRAIN_S)
        figures = latency_figures(steady, consumer.seen_ms, steady_from_ms)
        steady_batches = [p["durationMs"]["triggerExecution"] for p in query.recentProgress]
        tiny_from = time.time()
        producer.run(settings.tiny_rate, settings.tiny_seconds)
        tiny = [
            p
            for p in query.recentProgress
            if epoch_s(p["timestamp"]) >= tiny_from and p["numInputRows"] > 0
        ]
    finally:
        _wait_until_idle(query, 30.0)  # stopping mid-batch makes Spark log aborted tasks
        query.stop()
        consumer.stop()
    kafka.delete_topic(topic)
    kafka.delete_topic(output)
    return {
        **figures,
        "batch_ms_p50_steady": statistics.median(steady_batches) if steady_batches else None,
        "tiny_batches": fixed_cost_figures(tiny),
    }


def run(spark: Any, kafka: Any, work: Path, settings: Settings) -> dict[str, Any]:
    """Workload 5 (module docstring); returns its figures and prints each contender's."""
    print(
        f"workload 5: latency at {settings.rate:,} records/s for {settings.seconds} s "
        f"(first {settings.warmup_s} s left out), then {settings.tiny_rate} records/s for "
        f"{settings.tiny_seconds} s",
        flush=True,
    )
    contenders = {}
    for name in VARIANTS:
        r = _variant(spark, kafka, name, settings, work)
        contenders[name] = r
        tiny = r["tiny_batches"]
        print(
            f"  {name:<16} seen {r['seen']:,} of {r['produced']:,}; latency ms p50 "
            f"{r.get('latency_ms_p50')} p99 {r.get('latency_ms_p99')} max "
            f"{r.get('latency_ms_max')}; tiny batches: {tiny['batches']}, "
            f"p50 {tiny.get('batch_ms_p50')} ms (addBatch {tiny.get('add_batch_ms_p50')} ms)",
            flush=True,
        )
    return {
        "rate": settings.rate,
        "seconds": settings.seconds,
        "warmup_s": settings.warmup_s,
        "tiny_rate": settings.tiny_rate,
        "tiny_seconds": settings.tiny_seconds,
        "contenders": contenders,
    }
