"""Monitoring (issue 11): consumer-group offsets (with ``kafka.group.id`` or ``groupIdPrefix``
the source commits each batch's end offsets to a group, so Kafka's lag tools see the query; the
checkpoint stays the truth for where a restart resumes), and the listener of
``unaligned.monitor(spark)`` with offsets behind latest and barrier figures per batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafka.structs import OffsetAndMetadata, TopicPartition

from harness import kafka_stream, wait_until
from kafka import KafkaConsumer
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.waiting import barrier_token
from unaligned.testing import EmbeddedKafka

PARTITIONS = 3


def committed(kafka: EmbeddedKafka, group: str, topic: str) -> dict[int, int | None]:
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()


def run(spark: Any, kafka: EmbeddedKafka, topic: str, tmp_path: Path, **options: str) -> None:
    query = (
        kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="100", **options)
        .writeStream.format("unaligned")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)


def produce(kafka: EmbeddedKafka, topic: str, per_partition: int) -> None:
    kafka.produce(
        topic,
        ((p, None, b"v", None, None) for p in range(PARTITIONS) for _ in range(per_partition)),
    )


def test_the_group_trails_the_query_and_the_checkpoint_stays_the_truth(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic, group = new_topic(partitions=PARTITIONS), f"lag-{tmp_path.name}"
    produce(kafka, topic, 90)
    run(spark, kafka, topic, tmp_path, **{"kafka.group.id": group})
    # availableNow: Spark commits the source's last batch when the next run starts, so the
    # group has at least the end of the batch before the last one, never more than was read.
    first = committed(kafka, group, topic)
    assert first and all(o is not None and 0 < o <= 90 for o in first.values()), first

    # Somebody moves the group: the query still resumes from its checkpoint.
    mover = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group)
    mover.commit(
        {TopicPartition(topic, p): OffsetAndMetadata(0, "", -1) for p in range(PARTITIONS)}
    )
    mover.close()
    produce(kafka, topic, 10)
    run(spark, kafka, topic, tmp_path, **{"kafka.group.id": group})
    import unaligned

    rows = unaligned.read_committed_files(str(tmp_path / "out")).num_rows
    assert rows == 100 * PARTITIONS, "the restart read from the group, not the checkpoint"
    after = committed(kafka, group, topic)
    assert after and all(o is not None and o >= 90 for o in after.values()), after


def test_group_id_prefix_names_one_group_per_query(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    produce(kafka, topic, 150)
    run(spark, kafka, topic, tmp_path, groupIdPrefix="mon")
    token = barrier_token(Checkpoint.resolve(str(tmp_path / "checkpoint")))
    offsets = committed(kafka, f"mon-{token}", topic)
    assert offsets and all(o is not None and o > 0 for o in offsets.values()), json.dumps(offsets)


def test_the_listener_reports_lag_and_barrier_figures_of_every_batch(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    import unaligned
    from unaligned.monitoring import QueryFigures, figures_of

    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    produce(kafka, topic, 200)
    seen: list[QueryFigures] = []
    listener = unaligned.monitor(spark, seen.append)
    try:
        query = (
            kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="300")
            .select("value", "partition")
            .writeStream.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", output)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        wait_until(lambda: len({f.batch_id for f in seen}) >= 2, "the listener's events")
    finally:
        spark.streams.removeListener(listener)
    first = min(seen, key=lambda f: f.batch_id)
    assert first.query_id == str(query.id)
    assert first.offsets_behind is not None and first.offsets_behind.max == 100  # 200 - 100
    assert first.barrier is not None and first.barrier.rows_written == 300
    assert listener.latest[str(query.id)] == max(seen, key=lambda f: f.batch_id)
    last = figures_of(query.lastProgress)  # the same figures from lastProgress
    assert last is not None and last.offsets_behind is not None and last.offsets_behind.max == 0
