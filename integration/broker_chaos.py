"""Broker faults on a running query: a schedule of kills, freezes and controlled restarts on a
three-node :class:`~unaligned.testing.EmbeddedKafka`, run in a thread beside the query, and the
query's own record of how it rode through.

A :class:`Fault` names a node by role, resolved at the moment it strikes (``leader:<topic>:<p>``,
``txn-coordinator:<transactional id>``, or a node id), what happens to it (``kill``: SIGKILL
for ``down_s`` then a restart; ``freeze``: SIGSTOP for ``down_s`` then SIGCONT; ``stop``: a
controlled shutdown, restarted after ``down_s``, then every partition of ``wait_replicated``
fully in sync again before the next fault, as a rolling upgrade waits) and the pause after it.
:class:`Chaos` runs the faults in order and records each (:class:`Struck`: which node, when,
how long it was down). :func:`run_until_caught_up` watches queries until their checkpoints
committed a batch that reached the input's end, failing at once if one of them stops.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unaligned.testing import EmbeddedKafka


@dataclass(frozen=True)
class Fault:
    role: str
    action: str  # kill | freeze | stop
    down_s: float
    pause_s: float = 4.0
    wait_replicated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Struck:
    fault: Fault
    node: int
    at_s: float
    back_s: float


def resolve(kafka: EmbeddedKafka, role: str) -> int:
    """The node id a role names now."""
    kind, _, rest = role.partition(":")
    if kind == "leader":
        topic, _, partition = rest.rpartition(":")
        return kafka.leader(topic, int(partition))
    if kind == "txn-coordinator":
        return kafka.transaction_coordinator(rest)
    return int(role)


@dataclass
class Chaos:
    """The fault schedule, run by :meth:`start` in a thread (module docstring)."""

    kafka: EmbeddedKafka
    faults: Sequence[Fault]
    delay_s: float = 3.0
    struck: list[Struck] = field(default_factory=list)
    error: BaseException | None = None
    _thread: threading.Thread | None = None
    _started: float = 0.0

    def start(self) -> Chaos:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="broker-chaos", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            time.sleep(self.delay_s)
            for fault in self.faults:
                node_id = resolve(self.kafka, fault.role)
                node = self.kafka.node(node_id)
                at = time.monotonic() - self._started
                if fault.action == "kill":
                    node.kill()
                    time.sleep(fault.down_s)
                    node.restart()
                elif fault.action == "freeze":
                    node.freeze()
                    time.sleep(fault.down_s)
                    node.thaw()
                elif fault.action == "stop":
                    node.stop()
                    time.sleep(fault.down_s)
                    node.restart()
                else:
                    raise ValueError(f"unknown fault {fault.action!r}")
                for topic in fault.wait_replicated:
                    self.kafka.wait_fully_replicated(topic, timeout_s=120)
                self.struck.append(Struck(fault, node_id, at, time.monotonic() - self._started))
                time.sleep(fault.pause_s)
        except BaseException as exc:  # reported by join(): a harness failure, not the query's
            self.error = exc

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout_s: float = 300) -> list[Struck]:
        assert self._thread is not None
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "harness: the fault schedule did not finish"
        if self.error is not None:
            raise AssertionError(f"harness: the fault schedule failed: {self.error!r}")
        return list(self.struck)


def committed_end(checkpoint: Path) -> dict[str, dict[str, int]] | None:
    """The source end offsets of the newest batch Spark committed under ``checkpoint`` (ours or
    Spark's Kafka source's)."""
    commits = sorted((int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")), reverse=True)
    for batch in commits:
        offsets = checkpoint / "offsets" / str(batch)
        if offsets.exists():
            last = json.loads(offsets.read_text().splitlines()[-1])
            # ours: {"offsets": {topic: {p: o}}, ...}; Spark's Kafka source: {topic: {p: o}}
            found: dict[str, dict[str, int]] = last.get("offsets", last)
            return found
    return None


def caught_up(checkpoint: Path, topic: str, ends: Mapping[int, int]) -> bool:
    end = committed_end(checkpoint)
    got = {} if end is None else end.get(topic, {})
    return all(int(got.get(str(p), -1)) >= offset for p, offset in ends.items())


def run_until_caught_up(
    queries: Sequence[Any],
    checkpoints: Sequence[Path],
    topic: str,
    ends: Mapping[int, int],
    chaos: Chaos,
    timeout_s: float,
    on_tick: Callable[[], None] = lambda: None,
) -> None:
    """Block until the fault schedule ended and every query committed a batch reaching
    ``ends``; a query that stops fails at once, with its error."""
    deadline = time.monotonic() + timeout_s
    while True:
        for query in queries:
            failure = query.exception()
            assert failure is None and query.isActive, (
                f"the query failed during broker faults {chaos.struck}: {failure}"
            )
        done = all(caught_up(c, topic, ends) for c in checkpoints)
        if done and not chaos.running:
            return
        assert time.monotonic() < deadline, (
            f"timed out after {timeout_s} s (faults done: {chaos.struck}, caught up: "
            f"{[caught_up(c, topic, ends) for c in checkpoints]})"
        )
        on_tick()
        time.sleep(0.5)


def input_stream(
    spark: Any, kafka: EmbeddedKafka, topic: str, per_trigger: int, fmt: str = "unaligned"
) -> Any:
    """``key, value, partition`` of ``topic`` from the earliest offsets, ``per_trigger`` records
    a batch at most, through ``fmt`` (ours, or Spark's ``kafka``)."""
    return (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
        .selectExpr("key", "value", "partition")
    )


def to_kafka(
    stream: Any, kafka: EmbeddedKafka, output: str, checkpoint: Path, fmt: str = "unaligned"
) -> Any:
    """``stream`` written to ``output`` through ``fmt``'s sink, a batch a second at most (each
    record to the partition it was read from)."""
    return (
        stream.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )


def batch_durations_ms(query: Any) -> list[int]:
    """``triggerExecution`` of each batch Spark still reports (the last 100)."""
    return [int(p["durationMs"].get("triggerExecution", 0)) for p in query.recentProgress]
