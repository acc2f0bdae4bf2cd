"""The supported broker range, kept true: the oldest supported Apache Kafka (3.6.2, KRaft) and
the newest (4.4.0, the shared broker of every other test) each run the source, the exactly-once
Kafka sink and a start from a timestamp, then a second run from the same checkpoint; kcat
(read_committed) finds every record at or after the start time exactly once and nothing before.

The old broker is Apache Kafka's own release, fetched by Maven and started by the test kit
(``EmbeddedKafka(kafka_version=...)``); docs/operations/versions.md states the range."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import kcat_read_committed
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

OLDEST = "3.6.2"
START_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def oldest_kafka() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(kafka_version=OLDEST) as kafka:
        yield kafka


@pytest.fixture(params=["oldest", "newest"])
def broker(request: pytest.FixtureRequest) -> EmbeddedKafka:
    name = "oldest_kafka" if request.param == "oldest" else "kafka"
    kafka: EmbeddedKafka = request.getfixturevalue(name)
    return kafka


def _produce(kafka: EmbeddedKafka, topic: str, first: int, count: int) -> None:
    """Records ``first`` .. ``first + count - 1``, record ``i`` stamped ``START_MS + i`` s."""
    kafka.produce(
        topic,
        [
            (i % 2, f"k{i}".encode(), f"v{i:05d}".encode(), None, START_MS + i * 1000)
            for i in range(first, first + count)
        ],
    )


def test_source_and_exactly_once_sink_from_a_timestamp(
    spark: Any, broker: EmbeddedKafka, tmp_path: Path
) -> None:
    source, output = f"versions-in-{uuid.uuid4().hex[:8]}", f"versions-out-{uuid.uuid4().hex[:8]}"
    broker.create_topic(source, partitions=2)
    broker.create_topic(output, partitions=2)
    _produce(broker, source, 0, 200)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> None:
        query = (
            spark.readStream.format("unaligned")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("subscribe", source)
            .option("startingTimestamp", str(START_MS + 50 * 1000))  # a new query starts there
            .option("maxOffsetsPerTrigger", "60")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("unaligned")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("topic", output)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180), "the availableNow query did not end"
        finally:
            if query.isActive:
                query.stop()
        assert query.exception() is None

    run()
    _produce(broker, source, 200, 40)
    run()  # resumes from the checkpoint: the timestamp is not looked up again

    values = sorted(r["value"] for r in kcat_read_committed(broker.bootstrap_servers, output))
    assert values == [f"v{i:05d}" for i in range(50, 240)]
