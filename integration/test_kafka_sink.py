"""The Kafka sink end to end in the shared Spark session: real broker, read_committed readers.

Crash behaviour is in test_sink_crash_matrix.py; here: what the user writes (columns, options,
headers, a topic column), what a read_committed consumer sees, and that bad input is refused
before any record is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness import kafka_stream, kcat_read_committed, wait_until
from unaligned.checkpoint import Checkpoint
from unaligned.kafka.transactions import transaction_states
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]


def _run_to_end(writer: Any, checkpoint: Path, timeout_s: float = 240) -> Any:
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(timeout_s), "query did not finish in time"
    return query


def test_kafka_to_kafka_with_headers_topic_column_and_string_values(
    spark: SparkSession, kafka: EmbeddedKafka, new_topic: TopicFactory, checkpoint_dir: Path
) -> None:
    source_topic = new_topic(partitions=2)
    output = new_topic(partitions=3)
    records = [
        (
            i % 2,
            f"k{i}".encode(),
            f"value-{i}".encode(),
            [("h", f"{i}".encode())] if i % 3 else None,
            None,
        )
        for i in range(300)
    ]
    kafka.produce(source_topic, records)
    df = kafka_stream(spark, kafka, source_topic, includeHeaders="true", maxOffsetsPerTrigger="120")
    out = df.select(
        F.col("key"),
        F.concat(F.lit("out-"), F.col("value").cast("string")).alias("value"),  # a string value
        F.col("headers"),
        F.lit(output).alias("topic"),  # per-row topic, no topic option
        (F.col("offset") % 3).cast("int").alias("partition"),
    )
    query = _run_to_end(
        out.writeStream.format("unaligned").option(
            "kafka.bootstrap.servers", kafka.bootstrap_servers
        ),
        checkpoint_dir,
    )

    wait_until(lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output), "LSO == end")
    got = kafka.consume_all(output, read_committed=True)
    assert sorted(r.value for r in got) == sorted(f"out-value-{i}".encode() for i in range(300))
    by_value = {r.value: r for r in got}
    for i in (1, 2, 3, 299):
        record = by_value[f"out-value-{i}".encode()]
        assert record.key == f"k{i}".encode()
        expected_headers = [("h", f"{i}".encode())] if i % 3 else []
        assert list(record.headers) == expected_headers
    assert {r.partition for r in got} == {0, 1, 2}
    # An independent reader (kcat: librdkafka, read_committed) sees every record exactly once,
    # with its key, value, headers and the partition its row asked for (source offset % 3).
    seen = kcat_read_committed(kafka.bootstrap_servers, output)
    assert sorted(r["value"] for r in seen) == sorted(f"out-value-{i}" for i in range(300))
    for r in seen:
        i = int(r["value"].rsplit("-", 1)[1])
        assert r["key"] == f"k{i}"
        assert r["headers"] == ([("h", str(i))] if i % 3 else [])
        assert r["partition"] == (i // 2) % 3

    # Transactional ids carry the query id (from the checkpoint's metadata on the driver, the
    # same id the tasks see as the sql.streaming.queryId local property).
    prefix = default_transactional_id_prefix(str(query.id))
    log = CommitLog(Checkpoint.resolve(str(checkpoint_dir)))
    assert log.decided_batch_ids() == [0, 1, 2]
    used = set()
    for batch_id in log.decided_batch_ids():
        record = log.read(batch_id)
        assert record is not None and record.prepared
        used.update(item["transactionalId"] for item in record.prepared)
    # The bounded pool: two ids per sink task, slot 0 in even batches and 1 in odd ones (no
    # task failed).
    tasks = {tid.rsplit("-", 2)[1] for tid in used}
    assert used == {f"{prefix}-{task}-{slot}" for task in tasks for slot in (0, 1)}
    wait_until(
        lambda: (
            transaction_states.list_transactional_ids(
                {"bootstrap_servers": kafka.bootstrap_servers}, prefix
            )
            == []
        ),
        "no open transaction of the sink",
    )


def test_a_second_run_continues_without_duplicates(
    spark: SparkSession, kafka: EmbeddedKafka, new_topic: TopicFactory, checkpoint_dir: Path
) -> None:
    source_topic = new_topic(partitions=1)
    output = new_topic(partitions=1)
    kafka.produce(source_topic, [(0, None, f"a{i}".encode(), None, None) for i in range(50)])
    writer = lambda: (  # noqa: E731
        kafka_stream(spark, kafka, source_topic)
        .select("value")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("transactionalIdPrefix", f"it-{output}")
        .option("maxUnacknowledgedBytes", "64KB")  # the docs' size spellings, one parser
        .option("kafka.batch.size", "16KiB")
    )
    _run_to_end(writer(), checkpoint_dir)
    kafka.produce(source_topic, [(0, None, f"b{i}".encode(), None, None) for i in range(50)])
    _run_to_end(writer(), checkpoint_dir)
    values = [r.value for r in kafka.consume_all(output, read_committed=True)]
    assert values == [f"a{i}".encode() for i in range(50)] + [f"b{i}".encode() for i in range(50)]


@pytest.mark.parametrize(
    "case",
    ["acks", "timeout_above_broker_max", "value_type", "missing_topic", "typo", "typo_mode"],
)
def test_bad_input_is_refused_before_any_data_moves(
    case: str,
    spark: SparkSession,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    checkpoint_dir: Path,
) -> None:
    source_topic = new_topic(partitions=1)
    output = new_topic(partitions=1)
    kafka.produce(source_topic, [(0, None, b"x", None, None)])
    df = kafka_stream(spark, kafka, source_topic).select("key", "value")
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": output}
    if case == "acks":
        options["kafka.acks"] = "1"
        expected = "SinkConfigurationError: option 'kafka.acks' = '1'"
    elif case == "timeout_above_broker_max":
        options["kafka.transaction.timeout.ms"] = "86400000"
        expected = (
            "'kafka.transaction.timeout.ms' = 86400000 is above the brokers' "
            "transaction.max.timeout.ms="
        )
    elif case == "value_type":
        df = df.select("key", F.length("value").alias("value"))
        expected = (
            "SchemaMismatchError: Kafka sink input column 'value' has type int; it must be "
            "string or binary: convert it with CAST(value AS STRING) or CAST(value AS BINARY)"
        )
    elif case == "typo":
        options["alignedCheckpointTimout"] = "5s"
        expected = (
            "unknown option 'alignedcheckpointtimout' for the unaligned sink; known options: "
        )
    elif case == "typo_mode":
        options["checkpointMod"] = "aligned"
        expected = "unknown option 'checkpointmod' for the unaligned sink; known options: "
    else:
        options["topic"] = f"{output}-missing"
        expected = f"TopicNotFoundError: Kafka sink option 'topic' = '{output}-missing'"
    writer = df.writeStream.format("unaligned")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(StreamingQueryException) as raised:
        _run_to_end(writer, checkpoint_dir, timeout_s=120)
        raise AssertionError("the query ran to the end")
    assert expected.lower() in str(raised.value).lower()
    if case.startswith("typo"):
        for known in ("alignedCheckpointTimeout", "checkpointMode", "maxUnacknowledgedBytes"):
            assert known in str(raised.value)
    assert kafka.end_offsets(output) == {0: 0}
    assert CommitLog(Checkpoint.resolve(str(checkpoint_dir))).decided_batch_ids() == []


def test_a_commit_record_edited_into_other_valid_json_stops_the_restart_naming_it(
    spark: SparkSession, kafka: EmbeddedKafka, new_topic: TopicFactory, checkpoint_dir: Path
) -> None:
    source_topic = new_topic(partitions=1)
    output = new_topic(partitions=1)
    kafka.produce(source_topic, [(0, None, f"a{i}".encode(), None, None) for i in range(100)])
    writer = lambda: (  # noqa: E731
        kafka_stream(spark, kafka, source_topic, maxOffsetsPerTrigger="50")
        .select("value")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
    )
    _run_to_end(writer(), checkpoint_dir)
    log = CommitLog(Checkpoint.resolve(str(checkpoint_dir)))
    last = log.decided_batch_ids()[-1]
    path = checkpoint_dir / "unaligned" / "commits" / f"{last}.json"
    original = path.read_bytes()
    document = json.loads(original)
    document["prepared"][0]["recordCount"] += 1  # still valid JSON, no longer what was decided
    path.write_text(json.dumps(document, sort_keys=True))
    kafka.produce(source_topic, [(0, None, f"b{i}".encode(), None, None) for i in range(50)])

    with pytest.raises(StreamingQueryException) as raised:
        _run_to_end(writer(), checkpoint_dir, timeout_s=120)
        raise AssertionError("the query ran on a changed commit record")
    assert f"CommitLogError: commit record {path}: its content does not match its checksum" in (
        str(raised.value)
    )
    first = [f"a{i}".encode() for i in range(100)]
    assert [r.value for r in kafka.consume_all(output, read_committed=True)] == first

    path.write_bytes(original)  # restored: the query reads on, exactly once
    _run_to_end(writer(), checkpoint_dir)
    values = [r.value for r in kafka.consume_all(output, read_committed=True)]
    assert values == first + [f"b{i}".encode() for i in range(50)]
    seen = kcat_read_committed(kafka.bootstrap_servers, output)
    assert sorted(r["value"] for r in seen) == sorted(v.decode() for v in values)
