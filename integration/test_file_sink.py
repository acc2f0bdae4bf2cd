"""The file sink end to end in the shared Spark session: Kafka -> Parquet files -> read back
through the manifest, with the package's reader and with spark.read.format("unaligned"); two
queries with their own checkpoints writing to one path side by side, one of them restarted."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import unaligned
from harness import kafka_stream
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.files.file_manifest import MANIFEST_DIR, STAGING_DIR, parse_manifest_name
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
    assert CommitLog(Checkpoint.resolve(str(checkpoint_dir))).unfinished_batch_ids() == []

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
    with pytest.raises(StreamingQueryException, match="both option 'path'"):
        query.awaitTermination(120)
    assert not (tmp_path / "out").exists()


def _tagged_query(
    spark: SparkSession, kafka: EmbeddedKafka, topic: str, tag: str, output: Path, checkpoint: Path
) -> StreamingQuery:
    """Kafka -> files under ``output``; every row carries ``tag`` (which query wrote it)."""
    df = kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="15").select(
        F.lit(tag).alias("query"),
        "partition",
        "offset",
        F.col("value").cast("string").alias("text"),
    )
    return (
        df.writeStream.format("unaligned")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_two_queries_with_their_own_checkpoints_share_one_path(
    spark: SparkSession,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
) -> None:
    """The same topic read twice (a second checkpoint, as after deleting the first one), both
    queries writing to one path at the same time with the same batch and partition numbers;
    then the first query restarted from its checkpoint with new input. Every record is read back
    once per query that read it: nothing overwritten, nothing lost, nothing twice."""
    topic = new_topic(partitions=2)
    first_input = [(i % 2, None, f"v{i}".encode(), None, None) for i in range(80)]
    kafka.produce(topic, first_input)
    output = tmp_path / "out"
    checkpoints = {"first": tmp_path / "ck-first", "second": tmp_path / "ck-second"}
    queries = [
        _tagged_query(spark, kafka, topic, tag, output, checkpoint)
        for tag, checkpoint in checkpoints.items()
    ]
    for query in queries:
        assert query.awaitTermination(240)

    kafka.produce(topic, [(i % 2, None, f"v{i}".encode(), None, None) for i in range(80, 110)])
    restarted = _tagged_query(spark, kafka, topic, "first", output, checkpoints["first"])
    assert restarted.awaitTermination(240)

    table = unaligned.read_committed_files(str(output))
    rows = Counter(
        zip(
            table.column("query").to_pylist(),
            table.column("text").to_pylist(),
            strict=True,
        )
    )
    expected = Counter(
        [("first", f"v{i}") for i in range(110)] + [("second", f"v{i}") for i in range(80)]
    )
    assert rows == expected, f"missing: {expected - rows}, extra: {rows - expected}"
    read_back = spark.read.format("unaligned").option("path", str(output)).load()
    assert read_back.count() == table.num_rows == 190
    # Spark's own reader of the output (_spark_metadata, one log for both queries) agrees.
    parquet = spark.read.parquet(str(output)).select("query", "text").collect()
    assert Counter((r.query, r.text) for r in parquet) == expected

    query_ids = {tag: Checkpoint.resolve(str(ck)).query_id() for tag, ck in checkpoints.items()}
    names = [parse_manifest_name(p.name) for p in (output / MANIFEST_DIR).glob("*.json")]
    batches = {
        tag: {n.batch_id for n in names if n and n.query_id == qid}
        for tag, qid in query_ids.items()
    }
    assert 0 in batches["first"] and 0 in batches["second"]  # the same batch ids, side by side
    assert len(batches["first"]) > len(batches["second"])  # the restart added batches
    listed = {
        f["path"]
        for entry in (output / MANIFEST_DIR).glob("*.json")
        for f in json.loads(entry.read_text())["files"]
    }
    data_files = {f.name for f in output.glob("*.parquet")}
    assert data_files == listed, f"data files not in the manifest: {data_files - listed}"
    assert data_files and all(any(q in name for q in query_ids.values()) for name in data_files)
    assert not [f for f in (output / STAGING_DIR).rglob("*") if f.is_file()]
    for checkpoint in checkpoints.values():
        assert CommitLog(Checkpoint.resolve(str(checkpoint))).unfinished_batch_ids() == []
