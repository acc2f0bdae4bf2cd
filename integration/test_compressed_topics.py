"""Compressed Kafka data end to end: every codec Kafka has, written by the broker's own (Java)
compressors, read by ``format("unaligned")``, and written back compressed by the sink.

Each input topic is created with a topic-level ``compression.type``, so the broker recompresses
whatever the test producer sends with Kafka's own codec implementation: the batches the source
decodes are exactly what a Java producer or a recompressing broker would store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from harness import kafka_stream, wait_until
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]
CODECS = ("gzip", "snappy", "lz4", "zstd")
RECORDS_PER_TOPIC = 400
PARTITIONS = 2


def _values(codec: str) -> list[tuple[int, bytes | None, bytes]]:
    """Compressible values, unique over every topic: ``<codec>-<i>-`` padded with text."""
    return [
        (
            i % PARTITIONS,
            None if i % 9 == 0 else f"key-{i % 13}".encode(),
            f"{codec}-{i:05d}-".encode() + b"lorem ipsum dolor " * (1 + i % 20),
        )
        for i in range(RECORDS_PER_TOPIC)
    ]


@pytest.mark.parametrize("sink_codec", ["lz4", "zstd"])
def test_every_kafka_codec_is_read_and_the_sink_writes_compressed_exactly_once(
    spark: SparkSession,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    checkpoint_dir: Path,
    sink_codec: str,
) -> None:
    topics = {
        codec: new_topic(partitions=PARTITIONS, config={"compression.type": codec})
        for codec in CODECS
    }
    sent = {codec: _values(codec) for codec in CODECS}
    for codec, topic in topics.items():
        kafka.produce(topic, [(p, k, v, None, None) for p, k, v in sent[codec]])
    output = new_topic(partitions=1)

    df = kafka_stream(spark, kafka, ",".join(topics.values()), maxOffsetsPerTrigger="500")
    query = (
        df.select("key", "value")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("kafka.compression.type", sink_codec)
        .option("checkpointLocation", str(checkpoint_dir))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "query did not finish in time"
    assert query.exception() is None

    wait_until(lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output), "LSO == end")
    got = kafka.consume_all(output, read_committed=True)
    # Exactly once: every input record once, with its key.
    expected = sorted((v, k) for codec in CODECS for _, k, v in sent[codec])  # values are unique
    assert sorted((r.value, r.key) for r in got) == expected
    # Per input partition, the output keeps the input order (one sink task per input partition,
    # one output partition).
    output_order = [r.value for r in got]
    for codec in CODECS:
        for partition in range(PARTITIONS):
            values = [v for p, _, v in sent[codec] if p == partition]
            positions = [output_order.index(v) for v in values]
            assert positions == sorted(positions), f"{codec} partition {partition}: order changed"
