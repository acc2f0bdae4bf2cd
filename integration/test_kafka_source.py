"""``spark.readStream.format("unaligned")`` against the real embedded broker and local Spark.

Each test reads back every record it produced and compares it column by column. Restartable
runs write to a parquet sink (the memory sink cannot restart from a checkpoint).
"""

from __future__ import annotations

import json
import pickle
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from harness import kafka_stream, wait_for_query
from kafka import KafkaProducer
from unaligned.errors import DataLossError, OffsetFormatError
from unaligned.kafka.records.record_columns import kafka_source_schema
from unaligned.source.options import SourceOptions
from unaligned.source.stream_reader import KafkaStreamReader
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]
QUERY_TIMEOUT_S = 180


def now_ms() -> int:
    return int(time.time() * 1000)


def run_available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the Trigger.AvailableNow query did not finish"
    return query


def read_back(spark: Any, out: Path) -> list[Any]:
    return spark.read.parquet(str(out)).orderBy("partition", "offset").collect()


def offsets_of(rows: Iterable[Any]) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in rows]


def ranges_of(planned: Iterable[Any]) -> list[tuple[int, int, int]]:
    """(partition, start, exclusive end) of every planned input partition."""
    return [(r.tp.partition, r.start, r.end) for p in planned for r in p.ranges]


def produce_numbered(
    kafka: EmbeddedKafka, topic: str, partitions: int, start: int, count: int
) -> None:
    ts = now_ms()
    kafka.produce(
        topic,
        [(i % partitions, b"k%d" % i, b"v%d" % i, None, ts) for i in range(start, start + count)],
    )


def test_reads_every_column_exactly_and_keeps_partition_order(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    base = now_ms() - 60_000
    sent = []
    for i in range(200):
        headers = (
            [("trace", b"t%d" % i), ("empty", b"")]
            if i % 3 == 0
            else ([("n", b"x")] if i % 3 == 1 else None)
        )
        key = None if i % 10 == 5 else b"key-%d" % i
        value = None if i % 25 == 1 else bytes([i % 256]) * (i % 50)
        sent.append((i % 4, key, value, headers, base + 7 * i))
    kafka.produce(topic, sent)

    df = kafka_stream(spark, kafka, topic, includeHeaders="true")
    assert df.schema == kafka_source_schema(True)
    query = (
        df.writeStream.format("memory")
        .queryName(f"all_{uuid.uuid4().hex[:8]}")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    rows = spark.sql(f"select * from {query.name}").collect()

    assert len(rows) == len(sent)
    for partition in range(4):
        expected = [s for s in sent if s[0] == partition]
        got = sorted((r for r in rows if r["partition"] == partition), key=lambda r: r["offset"])
        assert [r["offset"] for r in got] == list(range(len(expected)))
        for (_, key, value, headers, ts), row in zip(expected, got, strict=True):
            assert (row["key"], row["value"], row["topic"], row["timestampType"]) == (
                key,
                value,
                topic,
                0,
            )
            assert round(row["timestamp"].timestamp() * 1000) == ts
            assert row["headers"] == ([(k, v) for k, v in headers] if headers else None)
    # per-partition order: within each Spark task the rows came in offset order
    assert query.lastProgress["numInputRows"] == 200


def test_min_partitions_splits_reads_without_losing_or_repeating_records(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    produce_numbered(kafka, topic, 2, 0, 300)
    run_available_now(
        kafka_stream(spark, kafka, topic, minPartitions="7"), tmp_path / "out", tmp_path / "cp"
    )
    rows = read_back(spark, tmp_path / "out")
    assert offsets_of(rows) == [(p, o) for p in range(2) for o in range(150)]
    assert [r["value"] for r in rows if r["partition"] == 1] == [
        b"v%d" % i for i in range(1, 300, 2)
    ]


def test_restart_from_checkpoint_has_no_gap_and_no_duplicate(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    produce_numbered(kafka, topic, 4, 0, 400)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="100")

    # Run 1: processing-time trigger, stopped after a few batches (mid-stream).
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    wait_for_query(
        query,
        lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 200,
        "run 1 to make progress",
        QUERY_TIMEOUT_S,
    )
    query.stop()
    first = len(read_back(spark, out))
    assert 0 < first < 400

    produce_numbered(kafka, topic, 4, 400, 200)
    run_available_now(df, out, checkpoint)  # run 2 resumes from the checkpoint

    rows = read_back(spark, out)
    assert offsets_of(rows) == [(p, o) for p in range(4) for o in range(150)]
    assert sorted(r["value"] for r in rows) == sorted(b"v%d" % i for i in range(600))


def test_min_offsets_per_trigger_holds_batches_back_until_enough_records(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=2)
    produce_numbered(kafka, topic, 2, 0, 10)
    df = kafka_stream(spark, kafka, topic, minOffsetsPerTrigger="100", maxTriggerDelay="1h")
    query = df.writeStream.format("noop").trigger(processingTime="100 milliseconds").start()
    try:
        wait_for_query(  # Spark's rule: the first batch is due
            query,
            lambda: any(p["numInputRows"] for p in query.recentProgress),
            "the first batch",
            QUERY_TIMEOUT_S,
        )
        produce_numbered(kafka, topic, 2, 10, 30)
        held = time.monotonic() + 3
        while time.monotonic() < held:
            assert query.isActive
            time.sleep(0.2)
        assert (
            sum(p["numInputRows"] for p in query.recentProgress) == 10
        )  # 30 < 100 records waiting
        produce_numbered(kafka, topic, 2, 40, 80)
        wait_for_query(
            query,
            lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 120,
            "the held-back batch to be released",
            QUERY_TIMEOUT_S,
        )
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [10, 110]
    finally:
        query.stop()


def test_topics_created_later_that_match_subscribe_pattern_are_read(
    spark: Any, kafka: EmbeddedKafka
) -> None:
    prefix = f"pattern-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(f"{prefix}-a", partitions=1)
    produce_numbered(kafka, f"{prefix}-a", 1, 0, 3)
    seen: list[tuple[str, bytes]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        seen.extend((r["topic"], r["value"]) for r in batch.select("topic", "value").collect())

    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribePattern", f"{prefix}-.*")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = df.writeStream.foreachBatch(collect).trigger(processingTime="200 milliseconds").start()
    try:
        wait_for_query(query, lambda: len(seen) >= 3, "the first topic's records", QUERY_TIMEOUT_S)
        kafka.create_topic(f"{prefix}-b", partitions=2)
        kafka.create_topic(f"other-{prefix}", partitions=1)  # searched like Spark: this matches too
        kafka.create_topic(f"{uuid.uuid4().hex[:6]}-unrelated", partitions=1)
        produce_numbered(kafka, f"{prefix}-b", 2, 3, 4)
        wait_for_query(query, lambda: len(seen) >= 7, "the new topic's records", QUERY_TIMEOUT_S)
    finally:
        query.stop()
    assert sorted(seen) == [(f"{prefix}-a", b"v%d" % i) for i in range(3)] + [
        (f"{prefix}-b", b"v%d" % i) for i in range(3, 7)
    ]


def test_max_offsets_per_trigger_bounds_every_batch(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    produce_numbered(kafka, topic, 4, 0, 130)
    query = run_available_now(
        kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="25"),
        tmp_path / "out",
        tmp_path / "cp",
    )
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert sum(sizes) == 130
    assert max(sizes) <= 25 and len([s for s in sizes if s]) >= 6
    assert len(read_back(spark, tmp_path / "out")) == 130


def test_a_partition_added_while_the_query_runs_is_read_from_its_start(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=2)
    produce_numbered(kafka, topic, 2, 0, 20)
    seen: list[tuple[int, int, bytes]] = []
    lock = threading.Lock()

    def collect(batch: Any, _batch_id: int) -> None:
        rows = batch.select("partition", "offset", "value").collect()
        with lock:
            seen.extend((r["partition"], r["offset"], r["value"]) for r in rows)

    query = (
        kafka_stream(spark, kafka, topic)
        .writeStream.foreachBatch(collect)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for_query(query, lambda: len(seen) >= 20, "the first records", QUERY_TIMEOUT_S)
        kafka.add_partitions(topic, 3)
        producer = KafkaProducer(
            bootstrap_servers=kafka.bootstrap_servers
        )  # fresh metadata: 3 partitions
        for i in range(5):
            producer.send(topic, value=b"new-%d" % i, partition=2)
        producer.send(topic, value=b"more", partition=0)
        producer.flush()
        producer.close()
        wait_for_query(
            query, lambda: len(seen) >= 26, "the new partition's records", QUERY_TIMEOUT_S
        )
    finally:
        query.stop()
    assert sorted(seen)[-5:] == [(2, i, b"new-%d" % i) for i in range(5)]
    assert len(seen) == len(set(seen)) == 26


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_records_are_deleted_below_the_next_offset(
    spark: Any,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
    fail_on_data_loss: bool,
) -> None:
    topic = new_topic(partitions=1)
    produce_numbered(kafka, topic, 1, 0, 20)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = kafka_stream(spark, kafka, topic, failOnDataLoss=str(fail_on_data_loss).lower())
    run_available_now(df, out, checkpoint)  # next offset to read: 20
    produce_numbered(kafka, topic, 1, 20, 20)
    kafka.delete_records(topic, 0, before_offset=30)  # offsets 20..29 are gone unread

    if fail_on_data_loss:
        with pytest.raises(Exception) as excinfo:
            run_available_now(df, out, checkpoint)
        message = str(excinfo.value)
        assert "DataLossError" in message and f"{topic}-0" in message and "[20, 30)" in message
        assert len(read_back(spark, out)) == 20
    else:
        run_available_now(df, out, checkpoint)
        assert [r["offset"] for r in read_back(spark, out)] == list(range(20)) + list(range(30, 40))


def test_a_flaky_listing_keeps_a_topic_and_a_real_deletion_drops_it(
    kafka: EmbeddedKafka, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driver-side, against the real broker: a listing of every topic that leaves out a known
    topic is checked with a direct metadata request; only a real deletion drops the topic."""
    kept, deleted = new_topic(partitions=1), new_topic(partitions=1)
    produce_numbered(kafka, kept, 1, 0, 5)
    produce_numbered(kafka, deleted, 1, 0, 5)
    options = {
        "subscribe": f"{kept},{deleted}",
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "startingOffsets": "earliest",
    }
    reader = KafkaStreamReader(SourceOptions.parse(options))
    real_listing = reader.planning._lookup.topics
    left_out: list[str] = []

    def flaky_listing(names: Collection[str] | None = None) -> dict[str, list[int]]:
        listing = real_listing(names)
        while left_out:
            listing.pop(left_out.pop(), None)
        return listing

    monkeypatch.setattr(reader.planning._lookup, "topics", flaky_listing)
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert ranges_of(reader.partitions(start, first)) == [(0, 0, 5), (0, 0, 5)]

    produce_numbered(kafka, deleted, 1, 5, 5)
    left_out.append(deleted)  # one refresh without the topic, which still exists
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second["offsets"] == {kept: {"0": 5}, deleted: {"0": 10}}
    left_out.append(deleted)  # and one more while the batch is planned
    assert [
        (str(r.tp), r.start, r.end) for p in reader.partitions(first, second) for r in p.ranges
    ] == [
        (f"{kept}-0", 5, 5),
        (f"{deleted}-0", 5, 10),
    ]

    kafka.delete_topic(deleted)  # the broker now answers UNKNOWN_TOPIC_OR_PARTITION
    produce_numbered(kafka, kept, 1, 5, 3)
    third = reader.latestOffset(second, ReadAllAvailable())
    if third.get("layoutDrain"):  # the subscription changed: one batch at the old layout first
        assert third["offsets"] == second["offsets"]
        third = reader.latestOffset(third, ReadAllAvailable())
    assert third["offsets"] == {kept: {"0": 8}}
    with pytest.raises(DataLossError, match=f"{deleted}-0 from offset 10"):
        reader.partitions(second, third)
    reader.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_deleted_topic_is_detected_when_the_query_restarts(
    spark: Any,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
    fail_on_data_loss: bool,
) -> None:
    kept, deleted = new_topic(partitions=1), new_topic(partitions=1)
    produce_numbered(kafka, kept, 1, 0, 10)
    produce_numbered(kafka, deleted, 1, 100, 10)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", f"{kept},{deleted}")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .option("fetchOffset.retryIntervalMs", "100")
        .load()
    )
    run_available_now(df, out, checkpoint)
    assert len(read_back(spark, out)) == 20
    kafka.delete_topic(deleted)
    produce_numbered(kafka, kept, 1, 10, 5)

    if fail_on_data_loss:
        with pytest.raises(Exception) as excinfo:
            run_available_now(df, out, checkpoint)
        message = str(excinfo.value)
        assert "DataLossError" in message and f"{deleted}-0" in message, message
        assert len(read_back(spark, out)) == 20
    else:
        run_available_now(df, out, checkpoint)
        rows = read_back(spark, out)
        assert sorted((r["topic"], r["offset"]) for r in rows) == sorted(
            [(kept, i) for i in range(15)] + [(deleted, i) for i in range(10)]
        )


def test_read_committed_yields_exactly_the_committed_records_and_moves_past_markers(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers, transactional_id=f"src-{uuid.uuid4().hex}"
    )
    producer.init_transactions()

    def transaction(tag: str, commit: bool | None) -> None:
        """commit None: leave the transaction open."""
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, value=f"{tag}-{i}".encode(), partition=i % 2)
        producer.flush()
        if commit is not None:
            producer.commit_transaction() if commit else producer.abort_transaction()

    def committed_values(*tags: str) -> list[str]:
        return sorted(f"{tag}-{i}" for tag in tags for i in range(6))

    transaction("c1", True)
    transaction("a1", False)
    transaction("c2", True)
    transaction("open", None)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = kafka_stream(spark, kafka, topic, **{"kafka.isolation.level": "read_committed"})
    query = run_available_now(df, out, checkpoint)
    assert sorted(r["value"].decode() for r in read_back(spark, out)) == committed_values(
        "c1", "c2"
    )
    # the batch ended at the last stable offset: past the markers, before the open transaction
    end_offset = query.lastProgress["sources"][0]["endOffset"]
    end = (json.loads(end_offset) if isinstance(end_offset, str) else end_offset)["offsets"][topic]
    stable = kafka.last_stable_offsets(topic)
    assert {int(p): o for p, o in end.items()} == stable
    ends = kafka.end_offsets(topic)
    assert ends and all(stable[p] < o for p, o in ends.items())

    producer.commit_transaction()
    transaction("a2", False)
    transaction("c3", True)
    producer.close()
    query = run_available_now(df, out, checkpoint)
    values = sorted(r["value"].decode() for r in read_back(spark, out))
    assert values == committed_values("c1", "c2", "open", "c3")
    end_offset = query.lastProgress["sources"][0]["endOffset"]
    end = (json.loads(end_offset) if isinstance(end_offset, str) else end_offset)["offsets"][topic]
    assert {int(p): o for p, o in end.items()} == kafka.end_offsets(topic)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_fails_with_an_error_naming_the_servers(
    spark: Any, tmp_path: Path
) -> None:
    servers = f"127.0.0.1:{_closed_port()}"
    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", "anything")
        .option("kafka.request.timeout.ms", "2000")
        .option("kafka.default.api.timeout.ms", "4000")  # the bound of asking again
        .load()
    )
    started = time.monotonic()
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(Exception) as excinfo:
        query.awaitTermination(QUERY_TIMEOUT_S)
    assert "KafkaUnavailableError" in str(excinfo.value) and servers in str(excinfo.value)
    assert "kafka.default.api.timeout.ms=4000" in str(excinfo.value)
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("subscription", ["subscribe", "assign"])
def test_a_missing_topic_fails_with_topic_not_found(
    spark: Any, kafka: EmbeddedKafka, tmp_path: Path, subscription: str
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option(subscription, missing if subscription == "subscribe" else f'{{"{missing}": [0]}}')
        .option("fetchOffset.numRetries", "2")
        .option("fetchOffset.retryIntervalMs", "100")
        .load()
    )
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(Exception) as excinfo:
        query.awaitTermination(QUERY_TIMEOUT_S)
    message = str(excinfo.value)
    assert "TopicNotFoundError" in message and missing in message and subscription in message


def test_an_unknown_option_is_rejected_by_name(spark: Any, kafka: EmbeddedKafka) -> None:
    # Spark lower-cases option keys before the Python source sees them.
    with pytest.raises(Exception, match="OptionError: unknown option 'maxoffsetpertriger'"):
        kafka_stream(spark, kafka, "anything", maxOffsetPerTriger="10")


def test_the_reader_plans_its_read_tasks_in_stable_order(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    """Driver-side planning against the real broker, without Spark: ``readTasks`` tasks, the
    topic-partitions dealt round robin in (topic, partition) order, empty ranges included."""
    first, second = new_topic(partitions=3), new_topic(partitions=2)  # names sort in this order
    ts = now_ms()
    kafka.produce(first, [(1, None, b"x%d" % i, None, ts) for i in range(5)])
    kafka.produce(second, [(0, None, b"y%d" % i, None, ts) for i in range(3)])
    options = {
        "subscribe": f"{second},{first}",
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "startingOffsets": "earliest",
        "readTasks": "2",
    }
    reader = KafkaStreamReader(SourceOptions.parse(options))
    start = reader.initialOffset()
    token = start["barrierToken"]  # chosen once per query; names its idle-barrier hint
    assert isinstance(token, str) and token.isalnum()
    starting = {first: {"0": 0, "1": 0, "2": 0}, second: {"0": 0, "1": 0}}
    ids = start["topicIds"]  # Kafka's topic ids: a re-created topic has another one
    assert sorted(ids) == [first, second] and len(set(ids.values())) == 2
    assert start == {
        "offsets": starting,
        "idleBarrier": 0,
        "barrierToken": token,
        "queryStart": starting,  # the first batch's end records where the query started
        "readTasks": 2,  # recorded once: a restart elsewhere keeps the same task of each
        "topicIds": ids,
    }
    end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
    assert end["offsets"] == {first: {"0": 0, "1": 5, "2": 0}, second: {"0": 3, "1": 0}}
    assert end["barrierToken"] == token  # kept from batch to batch
    assert end["topicIds"] == ids
    assert end["queryStart"] == starting
    planned = reader.partitions(start, end)
    assert [(p.index, [(str(r.tp), r.start, r.end) for r in p.ranges]) for p in planned] == [
        (0, [(f"{first}-0", 0, 0), (f"{first}-2", 0, 0), (f"{second}-1", 0, 0)]),
        (1, [(f"{first}-1", 0, 5), (f"{second}-0", 0, 3)]),
    ]
    assert end["readTasks"] == 2
    assert pickle.loads(pickle.dumps(planned[1])) == planned[1]
    assert pickle.loads(pickle.dumps(reader))._options == reader._options  # no live consumer inside
    assert reader.latestOffset(end, ReadAllAvailable()) is end  # nothing new: no batch
    assert reader.partitions(end, end) == []

    limited = reader.latestOffset(start, ReadMaxRows(4))
    assert sum(sum(p.values()) for p in limited["offsets"].values()) == 4

    available_now = KafkaStreamReader(SourceOptions.parse(options))
    available_now.prepareForTriggerAvailableNow()
    kafka.produce(first, [(1, None, b"late", None, ts)])
    assert available_now.latestOffset(start, ReadAllAvailable()) == end  # never past the target
    second_end = reader.latestOffset(end, ReadAllAvailable())
    assert second_end["offsets"][first]["1"] == 6
    assert "queryStart" not in second_end  # only the first batch records the query start

    with pytest.raises(OffsetFormatError, match="start offset"):
        reader.partitions({"offsets": {first: {"0": -5}}, "idleBarrier": 0}, end)
    reader.stop()


def test_first_batch_rerun_after_a_restart_reads_from_the_original_latest_start(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    # Spark re-runs a planned but uncommitted first batch after a restart with a start it gets
    # from initialOffset() again; with startingOffsets=latest that resolves later. The batch
    # must still read from where the query first started: nothing skipped, nothing repeated.
    topic = new_topic(partitions=2)
    produce_numbered(kafka, topic, 2, 0, 10)  # before the query: not read with latest
    options = {
        "subscribe": topic,
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "startingOffsets": "latest",
    }
    first_run = KafkaStreamReader(SourceOptions.parse(options))
    start = first_run.initialOffset()
    produce_numbered(kafka, topic, 2, 10, 20)
    end = json.loads(json.dumps(first_run.latestOffset(start, ReadAllAvailable())))
    planned = ranges_of(first_run.partitions(start, end))
    assert planned == [(0, 5, 15), (1, 5, 15)]
    first_run.stop()  # the query dies here: batch 0 is in Spark's offset log, not committed

    produce_numbered(kafka, topic, 2, 30, 20)  # arrives while the query is down
    restarted = KafkaStreamReader(SourceOptions.parse(options))
    re_resolved = restarted.initialOffset()
    assert re_resolved["offsets"][topic] == {"0": 25, "1": 25}  # "latest" has moved on
    assert ranges_of(restarted.partitions(re_resolved, end)) == planned
    following = restarted.latestOffset(end, ReadAllAvailable())
    assert ranges_of(restarted.partitions(end, following)) == [(0, 15, 25), (1, 15, 25)]
    restarted.stop()


def test_a_starting_offset_beyond_the_log_end_is_refused_saying_so(
    spark: Any, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    produce_numbered(kafka, topic, 1, 0, 108)
    df = kafka_stream(spark, kafka, topic, startingOffsets=json.dumps({topic: {"0": 900}}))
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(Exception) as excinfo:
        query.awaitTermination(QUERY_TIMEOUT_S)
    message = str(excinfo.value)
    assert (
        "OptionError: option 'startingOffsets' names offsets beyond the end of the log "
        f"({topic}-0: offset 900, log end 108)"
    ) in message, message
    assert "went back" not in message


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_and_recreated_while_stopped_is_never_skipped_silently(
    spark: Any,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
    fail_on_data_loss: bool,
) -> None:
    topic = new_topic(partitions=1)
    produce_numbered(kafka, topic, 1, 0, 10)
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    df = kafka_stream(spark, kafka, topic, failOnDataLoss=str(fail_on_data_loss).lower())
    run_available_now(df, out, checkpoint)
    assert len(read_back(spark, out)) == 10
    kafka.delete_topic(topic)
    kafka.create_topic(topic, partitions=1)
    produce_numbered(kafka, topic, 1, 100, 15)  # grown past the saved position (10)

    if fail_on_data_loss:
        with pytest.raises(Exception) as excinfo:
            run_available_now(df, out, checkpoint)
        message = str(excinfo.value)
        assert f"DataLossError: topic '{topic}' was deleted and re-created: its topic id was" in (
            message
        )
        assert "Set failOnDataLoss=false to read the new topic from its earliest offset" in message
        assert len(read_back(spark, out)) == 10
    else:
        run_available_now(df, out, checkpoint)
        values = sorted(r["value"] for r in read_back(spark, out))
        assert values == sorted(
            [b"v%d" % i for i in range(10)] + [b"v%d" % i for i in range(100, 115)]
        )
