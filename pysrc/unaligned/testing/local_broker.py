"""``unaligned broker``: a local single-node Kafka for trying things, run until Ctrl-C.

It is :class:`~unaligned.testing.EmbeddedKafka` (KRaft, transactions enabled, 127.0.0.1 only)
on a chosen port, with the topics named on the command line. From an installed package the
first start builds the broker's launcher with Maven into the user cache directory
(:mod:`unaligned.testing.shim_sources`) and says so in two lines (Maven's own output is shown
only when the build fails). Ctrl-C
(SIGINT) or SIGTERM stops the broker cleanly and the command exits 0. The broker's data is
deleted when it stops.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import TextIO

from unaligned.errors import EmbeddedKafkaError


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create at start."""

    name: str
    partitions: int


def parse_topic(raw: str) -> TopicSpec:
    """``NAME`` or ``NAME:PARTITIONS`` (at least 1); raises ``ValueError`` saying what is wrong."""
    name, sep, count = raw.partition(":")
    if not name:
        raise ValueError(f"{raw!r} has no topic name")
    if not sep:
        return TopicSpec(name, 1)
    try:
        partitions = int(count)
    except ValueError:
        raise ValueError(f"{raw!r}: {count!r} is not a number of partitions") from None
    if partitions < 1:
        raise ValueError(f"{raw!r}: a topic needs at least 1 partition")
    return TopicSpec(name, partitions)


def _show_build_progress(out: TextIO) -> None:
    """Print the launcher build's INFO lines (building, jars fetched, done) plainly."""
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    build_logger = logging.getLogger("unaligned.testing.shim_build")
    build_logger.addHandler(handler)
    build_logger.setLevel(logging.INFO)
    build_logger.propagate = False


def serve(port: int, topics: list[TopicSpec], out: TextIO = sys.stdout) -> int:
    """Run the broker until SIGINT or SIGTERM; 0 after a clean stop, 1 if it cannot start."""
    from unaligned.testing import EmbeddedKafka

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    _show_build_progress(out)
    print("starting a single-node Kafka broker (the first start builds it with Maven)", file=out)
    out.flush()
    try:
        with EmbeddedKafka(port=port or None) as broker:
            for topic in topics:
                broker.create_topic(topic.name, partitions=topic.partitions)
                print(f"created topic {topic.name!r} ({topic.partitions} partitions)", file=out)
            print(f"Kafka is ready: bootstrap servers {broker.bootstrap_servers}", file=out)
            print("press Ctrl-C to stop it (its data is deleted then)", file=out, flush=True)
            while not stop.wait(1.0):
                pass
            print("stopping the broker", file=out, flush=True)
    except EmbeddedKafkaError as exc:
        print(f"unaligned broker: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", file=out, flush=True)
    return 0
