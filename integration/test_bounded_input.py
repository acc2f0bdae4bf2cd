"""Bounded input (issue 9): ``endingOffsets`` / ``endingTimestamp`` in streaming queries, finished
partitions across a restart, ``endOfData`` in Spark's offset log, and batch reads of Kafka
(``spark.read.format("unaligned")``), against the real embedded broker and local Spark.

Spark never stops a processing-time query by itself: once the source's input has ended
(``latestOffset`` returns its start) the query stays active and plans no batch until stopped.
The processing-time test therefore checks that no batch runs past the end; the availableNow
tests check that the query ends by itself.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from harness import kafka_stream, wait_for_query
from kafka import KafkaProducer
from unaligned.kafka.records.record_columns import kafka_source_schema
from unaligned.testing import EmbeddedKafka

QUERY_TIMEOUT_S = 180


def produce_to(kafka: EmbeddedKafka, topic: str, partition: int, start: int, count: int) -> None:
    ts = int(time.time() * 1000)
    kafka.produce(
        topic,
        [
            (partition, b"k%d" % i, b"p%d-v%d" % (partition, i), None, ts)
            for i in range(start, start + count)
        ],
    )


def start_query(df: Any, out: Path, checkpoint: Path, **trigger: Any) -> Any:
    return (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def offsets_read(spark: Any, out: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    return sorted((r["partition"], r["offset"]) for r in rows)


def source_end(progress: Any) -> dict[str, Any]:
    end = progress["sources"][0]["endOffset"]
    return json.loads(end) if isinstance(end, str) else dict(end)


def offset_log(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """The source's offset JSON per batch, as Spark wrote it to ``<checkpoint>/offsets/<N>``."""
    logged = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            logged[int(path.name)] = json.loads(lines[2])
    return logged


def test_processing_time_query_reads_exactly_up_to_the_end_and_no_batch_runs_past_it(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    for p in (0, 1):
        produce_to(kafka, topic, p, 0, 50)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = kafka_stream(
        spark,
        kafka,
        topic,
        endingOffsets=json.dumps({topic: {"0": 30, "1": 40}}),
        maxOffsetsPerTrigger="25",
    )
    query = start_query(df, out, checkpoint, processingTime="200 milliseconds")
    try:
        wait_for_query(
            query,
            lambda: any(source_end(p).get("endOfData") for p in query.recentProgress),
            "the batch that ends the data",
            QUERY_TIMEOUT_S,
        )
        batches_at_end = query.lastProgress["batchId"]
        for p in (0, 1):
            produce_to(kafka, topic, p, 50, 20)  # past the end: never read
        time.sleep(3)  # about 15 triggers
        # Spark does not stop a processing-time query by itself; it plans no further batch.
        assert query.isActive
        planned = max(offset_log(checkpoint))
        assert planned == batches_at_end, f"batch {planned} planned after {batches_at_end}"
        later = [p for p in query.recentProgress if p["batchId"] > batches_at_end]
        assert [p["batchId"] for p in later if p["numInputRows"]] == []
    finally:
        query.stop()

    assert offsets_read(spark, out) == [(0, o) for o in range(30)] + [(1, o) for o in range(40)]
    logged = offset_log(checkpoint)
    last = max(logged)
    assert logged[last]["endOfData"] is True
    assert logged[last]["offsets"][topic] == {"0": 30, "1": 40}
    assert logged[last]["finished"] == {topic: [0, 1]}
    assert len(logged) == 3  # 70 records in batches of at most 25
    assert all("endOfData" not in logged[b] for b in logged if b < last)


def test_available_now_with_an_ending_timestamp_ends_by_itself(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    # recent timestamps: records stamped in 1970 are past the topic's retention, and the
    # broker's retention check (every 5 min of a long test run) would delete them
    late = int(time.time() * 1000) - 60_000
    kafka.produce(topic, [(0, None, b"early%d" % i, None, late - 10_000 + i) for i in range(10)])
    kafka.produce(topic, [(0, None, b"late%d" % i, None, late + i) for i in range(10)])
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = kafka_stream(spark, kafka, topic, endingTimestamp=str(late))
    query = start_query(df, out, checkpoint, availableNow=True)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the bounded query did not end"
    assert offsets_read(spark, out) == [(0, o) for o in range(10)]
    assert source_end(query.lastProgress)["endOfData"] is True


def test_a_restart_resumes_only_the_unfinished_partition_and_never_re_resolves_ends(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    produce_to(kafka, topic, 0, 0, 10)
    produce_to(kafka, topic, 1, 0, 10)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    # partition 0 ends at its latest when the query starts (10); partition 1 far beyond
    df = kafka_stream(spark, kafka, topic, endingOffsets=json.dumps({topic: {"0": -1, "1": 60}}))

    query = start_query(df, out, checkpoint, processingTime="200 milliseconds")
    try:
        wait_for_query(
            query,
            lambda: any(
                source_end(p)["offsets"][topic] == {"0": 10, "1": 10} for p in query.recentProgress
            ),
            "run 1 to read what there is",
            QUERY_TIMEOUT_S,
        )
    finally:
        query.stop()
    logged = offset_log(checkpoint)
    assert logged[max(logged)]["finished"] == {topic: [0]}
    assert logged[max(logged)]["ending"][topic] == {"0": 10, "1": 60}

    produce_to(kafka, topic, 0, 10, 30)  # past partition 0's end: not read after the restart
    produce_to(kafka, topic, 1, 10, 70)  # partition 1 reaches (and passes) its end
    query = start_query(df, out, checkpoint, availableNow=True)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the resumed bounded query did not end"
    assert offsets_read(spark, out) == [(0, o) for o in range(10)] + [(1, o) for o in range(60)]
    end = source_end(query.lastProgress)
    assert end["endOfData"] is True and end["ending"][topic] == {"0": 10, "1": 60}
    assert end["offsets"][topic] == {"0": 10, "1": 60}


def test_batch_read_equals_the_committed_records_of_the_range(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any
) -> None:
    topic = new_topic(partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers, transactional_id=f"bnd-{uuid.uuid4().hex}"
    )
    producer.init_transactions()
    for tag, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(8):
            producer.send(topic, key=b"%d" % i, value=f"{tag}-{i}".encode(), partition=i % 2)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()

    def batch(**options: str) -> Any:
        reader = (
            spark.read.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic)
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    committed = [
        (r.partition, r.offset, r.key, r.value)
        for r in kafka.consume_all(topic, read_committed=True)
    ]
    assert len(committed) == 16
    df = batch(**{"kafka.isolation.level": "read_committed"})
    assert df.schema == kafka_source_schema(False)
    rows = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in df.collect())
    assert rows == committed
    assert all(r[0] == topic for r in df.select("topic").collect())

    # a sub-range: [3, 15) of partition 0, [3, latest) of partition 1
    ranged = batch(
        **{
            "kafka.isolation.level": "read_committed",
            "startingOffsets": json.dumps({topic: {"0": 3, "1": 3}}),
            "endingOffsets": json.dumps({topic: {"0": 15, "1": -1}}),
        }
    )
    expected = [c for c in committed if c[1] >= 3 and (c[0] == 1 or c[1] < 15)]
    assert sorted(
        (r["partition"], r["offset"], r["key"], r["value"]) for r in ranged.collect()
    ) == (expected)

    # read_uncommitted (the default, as in Spark) sees the aborted records too
    values = {r["value"].decode() for r in batch().collect()}
    assert {f"a1-{i}" for i in range(8)} <= values and len(values) == 24
