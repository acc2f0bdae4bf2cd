"""The contenders: how each reads Kafka and writes Kafka, Parquet or nothing.

- ``peer``: Spark's own connector (``format("kafka")``, spark-sql-kafka on ``spark.jars``) with
  its defaults. Its sink is at-least-once.
- ``peer-tuned``: the same, with the source settings a user who cares about speed would pick:
  ``kafka.max.poll.records=10000`` and ``kafka.fetch.max.wait.ms=10``.
- ``ours``: ``format("unaligned")`` for both; the Kafka sink is exactly-once (transactions), the
  Parquet output is the sink's file mode (``path``).

Every query reads from the earliest offsets with the same ``maxOffsetsPerTrigger`` and writes
``value`` and ``partition`` (each record keeps its partition number) to Kafka, or ``value``,
``partition`` and ``offset`` to Parquet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PEER_TUNING = {"kafka.max.poll.records": "10000", "kafka.fetch.max.wait.ms": "10"}


@dataclass(frozen=True)
class Connector:
    name: str
    format: str
    """``kafka`` (Spark's) or ``unaligned`` (ours)."""
    source_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return self.format == "unaligned"


PEER = Connector("peer", "kafka")
PEER_TUNED = Connector("peer-tuned", "kafka", PEER_TUNING)
OURS = Connector("ours", "unaligned")
ALL = (PEER, PEER_TUNED, OURS)


def by_name(name: str) -> Connector:
    return next(c for c in ALL if c.name == name)


def spark_session(app_name: str, jars: str, conf: Mapping[str, str] | None = None) -> Any:
    """The session every contender's queries run in, the same for all: ``local[N]`` (N = CPU
    count), 2 GiB of driver memory, Spark's Kafka connector on ``spark.jars`` (``jars``: the
    peer's :meth:`~benchmarks.peer_connector.PeerConnector.spark_jars`; empty: without it),
    ``conf`` (a set-up's settings, :mod:`benchmarks.compare.opt_ins`) and
    :func:`extra_spark_conf`."""
    from benchmarks import local_spark

    settings = {"spark.driver.memory": "2g", **({"spark.jars": jars} if jars else {})}
    settings.update(conf or {})
    settings.update(extra_spark_conf())
    return local_spark(app_name, os.cpu_count() or 2, **settings)


def extra_spark_conf() -> dict[str, str]:
    """``UNALIGNED_BENCH_SPARK_CONF`` (``key=value`` pairs split by commas): settings every
    session of the benchmark gets, the same for every contender."""
    pairs = [p for p in os.environ.get("UNALIGNED_BENCH_SPARK_CONF", "").split(",") if p.strip()]
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"UNALIGNED_BENCH_SPARK_CONF: {pair!r} is not key=value")
        conf[key.strip()] = value.strip()
    return conf


def read_stream(
    spark: Any, connector: Connector, bootstrap: str, topic: str, max_offsets: int, **extra: str
) -> Any:
    """The input stream of ``topic`` from its earliest offsets (``extra``: more options)."""
    reader = (
        spark.readStream.format(connector.format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
    )
    for key, value in {**connector.source_options, **extra}.items():
        reader = reader.option(key, value)
    return reader.load()


def write_stream(
    df: Any,
    connector: Connector,
    output: str,
    checkpoint: str,
    bootstrap: str,
    sink_options: Mapping[str, str] | None = None,
) -> Any:
    """A ``writeStream`` (``availableNow``) to ``output``: ``noop``, ``kafka:<topic>`` or
    ``parquet:<path>``. ``sink_options`` go to our sink only."""
    kind, _, target = output.partition(":")
    if kind == "noop":
        writer = df.writeStream.format("noop")
    elif kind == "kafka":
        writer = df.select("value", "partition").writeStream.format(connector.format)
        writer = writer.option("kafka.bootstrap.servers", bootstrap).option("topic", target)
    elif kind == "parquet":
        file_format = "parquet" if connector.format == "kafka" else "unaligned"
        writer = df.select("value", "partition", "offset").writeStream.format(file_format)
        writer = writer.option("path", target)
    else:
        raise ValueError(f"unknown output {output!r}")
    if connector.exactly_once and kind != "noop":
        for key, value in (sink_options or {}).items():
            writer = writer.option(key, value)
    return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True)
