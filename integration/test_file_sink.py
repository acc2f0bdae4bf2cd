"""The file sink end to end in the shared Spark session: Kafka -> Parquet files -> read back
through the manifest, with the package's reader and with spark.read.format("unaligned")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import unaligned
from harness import kafka_stream
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.file_participant import MANIFEST_DIR, STAGING_DIR
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]


def test_kafka_to_files_and_back(
    spark: SparkSession,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    checkpoint_dir: Path,
    tmp_path: Path,
) -> None:
    topic = new_topic(partitions=3)
    kafka.produce(
        topic, [(i % 3, f"k{i}".encode(), f"v{i}".encode(), None, None) for i in range(600)]
    )
    output = tmp_path / "out"
    df = kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="250").select(
        "partition", "offset", F.col("value").cast("string").alias("text"), "timestamp"
    )
    query = (
        df.writeStream.format("unaligned")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint_dir))
        .option("compression", "zstd")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)

    table = unaligned.read_committed_files(str(output))
    assert table.num_rows == 600
    assert sorted(table.column("text").to_pylist()) == sorted(f"v{i}" for i in range(600))
    assert table.column_names == ["partition", "offset", "text", "timestamp"]
    assert not [f for f in (output / STAGING_DIR).rglob("*") if f.is_file()]
    assert len(list((output / MANIFEST_DIR).glob("*.json"))) == 3
    assert CommitLog.under_checkpoint(str(checkpoint_dir)).unfinished_batch_ids() == []

    read_back = spark.read.format("unaligned").option("path", str(output)).load()
    assert read_back.schema == df.schema
    rows = read_back.select("partition", "offset", "text").collect()
    assert sorted((r.partition, r.offset, r.text) for r in rows) == sorted(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("text").to_pylist(),
            strict=True,
        )
    )
    assert read_back.filter(F.col("timestamp").isNull()).count() == 0


def test_path_and_kafka_target_together_is_refused(
    spark: SparkSession,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    checkpoint_dir: Path,
    tmp_path: Path,
) -> None:
    topic = new_topic(partitions=1)
    kafka.produce(topic, [(0, None, b"x", None, None)])
    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("value")
    )
    query = (
        df.writeStream.format("unaligned")
        .option("path", str(tmp_path / "out"))
        .option("topic", topic)
        .option("checkpointLocation", str(checkpoint_dir))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException, match="both option path="):
        query.awaitTermination(120)
    assert not (tmp_path / "out").exists()
