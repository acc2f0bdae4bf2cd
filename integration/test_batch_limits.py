"""Record batches over a topic limit that changed, or that the sink could not read (issue 21,
item 4), against the real broker; read back by kcat (read_committed).

- ``max.message.bytes`` lowered while a worker process still has the old limit cached (a task
  writer in this process, and a running Spark query whose Python workers keep it): the batches
  the broker refuses are split and sent again within the same transaction, every record once,
  and the next chunk asks the limit again.
- ``DescribeConfigs`` refused (fail point ``describe_configs_refused``): batches bounded by
  ``max.request.size`` only, refused ones split, every record once.
- A single record over the lowered limit: a :class:`TransactionWriteError` at once, naming the
  topic and the input row; nothing of the transaction visible.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from harness import (
    kafka_stream,
    kcat_read_committed,
    wait_for_query,
    wait_until,
    write_one_transaction,
)
from unaligned._util.crash_points import CRASH_AT_ENV, FailPoint
from unaligned.errors import TransactionWriteError
from unaligned.kafka.produce import topic_limits
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]
_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", StringType()),
        StructField("offset", LongType()),
    ]
)
_LIMIT = 20_000


def _target(kafka: EmbeddedKafka, topic: str, **options: str) -> KafkaTarget:
    target = SinkOptions.parse(
        {
            "checkpointlocation": "/unused",
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "topic": topic,
            **options,
        }
    ).target
    assert isinstance(target, KafkaTarget)
    return target


def _chunk(values: list[str], first_offset: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([None] * len(values), pa.binary()),
            pa.array(values, pa.string()),
            pa.array(range(first_offset, first_offset + len(values)), pa.int64()),
        ],
        names=["key", "value", "offset"],
    )


def _write(target: KafkaTarget, chunks: list[pa.RecordBatch]) -> int:
    """One task's transaction over ``chunks``, prepared and committed from its handle."""
    return write_one_transaction(target, _SCHEMA, chunks, f"it-limits-{uuid.uuid4().hex[:8]}")[1]


def _in_time(target: KafkaTarget, chunks: list[pa.RecordBatch]) -> int:
    """:func:`_write` in a daemon thread: a refused batch sent again without end would hang."""
    done: list[int] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(_write(target, chunks))
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    if failed:
        raise failed[0]
    assert done, "the transaction did not prepare within 120 s"
    return done[0]


def _values(n: int, tag: str) -> list[str]:
    return [f"{tag}-{i:06d}-" + uuid.uuid4().hex * 3 for i in range(n)]


def _committed_values(kafka: EmbeddedKafka, topic: str) -> list[str]:
    wait_until(lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic), "LSO at end")
    return [str(r["value"]) for r in kcat_read_committed(kafka.bootstrap_servers, topic)]


def _splits(caplog: pytest.LogCaptureFixture) -> int:
    return sum("as too large" in r.getMessage() for r in caplog.records)


def test_a_limit_lowered_mid_run_splits_refused_batches_within_the_transaction(
    kafka: EmbeddedKafka, new_topic: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="unaligned.kafka.produce.produce_requests")
    topic = new_topic(partitions=1)
    target = _target(kafka, topic)
    first = _values(100, "before")
    assert _in_time(target, [_chunk(first, 0)]) == len(first)  # caches the 1 MiB default
    kwargs = target.client_kwargs()
    assert (topic_limits.max_message_bytes(kwargs, [topic])[topic] or 0) > 100_000
    kafka.set_topic_config(topic, {"max.message.bytes": str(_LIMIT)})
    later = _values(6_000, "after")
    chunks = [_chunk(later[i : i + 2_000], 100 + i) for i in range(0, len(later), 2_000)]
    assert _in_time(target, chunks) == len(later)
    got = _committed_values(kafka, topic)
    assert len(got) == len(first) + len(later)
    assert got == first + later  # every record once, in order
    assert _splits(caplog) > 0  # the broker did refuse batches built for the old limit
    assert topic_limits.max_message_bytes(kwargs, [topic])[topic] == _LIMIT  # asked again


def test_describe_configs_refused_falls_back_to_max_request_size_and_splits(
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="unaligned.kafka.produce.produce_requests")
    topic = new_topic(partitions=2, config={"max.message.bytes": str(_LIMIT)})
    monkeypatch.setenv(CRASH_AT_ENV, FailPoint.DESCRIBE_CONFIGS_REFUSED.value)
    target = _target(kafka, topic, **{"kafka.compression.type": "gzip"})
    assert topic_limits.max_message_bytes(target.client_kwargs(), [topic]) == {topic: None}
    values = [f"{i:06d}-" + uuid.uuid4().hex * 8 for i in range(8_000)]
    chunks = [_chunk(values[i : i + 4_000], i) for i in range(0, len(values), 4_000)]
    assert _in_time(target, chunks) == len(values)
    got = _committed_values(kafka, topic)
    assert sorted(got) == sorted(values) and len(set(got)) == len(values)
    assert _splits(caplog) > 0


def test_a_record_over_a_lowered_limit_fails_at_once_naming_topic_and_input_row(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=1)
    target = _target(kafka, topic)
    assert _in_time(target, [_chunk(["warm"], 0)]) == 1  # the 1 MiB limit cached
    kafka.set_topic_config(topic, {"max.message.bytes": str(_LIMIT)})
    rows = [*_values(50, "small"), "x" * 30_000, *_values(50, "tail")]
    with pytest.raises(TransactionWriteError) as refused:
        _in_time(target, [_chunk(rows, 1000)])
    text = str(refused.value)
    assert f"too large for topic {topic!r}" in text
    assert "input row 50 of the task, whose offset column is 1050" in text
    assert "max.message.bytes" in text
    assert _committed_values(kafka, topic) == ["warm"]


def test_a_limit_lowered_while_the_query_runs_costs_no_record_and_no_duplicate(
    spark: SparkSession, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """A Kafka-to-Kafka query runs; after its first records are committed the output topic's
    max.message.bytes is lowered to 20,000 bytes, below the batches the sink's workers build from
    the limit they asked at the start; the query goes on, nothing lost or duplicated."""
    source, output = new_topic(partitions=2), new_topic(partitions=2)

    def produce(tag: str) -> list[str]:
        values = [f"{tag}-{i:05d}-" + "x" * 200 for i in range(600)]
        kafka.produce(source, [(i % 2, None, v.encode(), None, None) for i, v in enumerate(values)])
        return values

    first = produce("first")
    query = (
        kafka_stream(spark, kafka, source)
        .select("value")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for_query(
            query,
            lambda: sum(kafka.last_stable_offsets(output).values()) >= 600,
            "the first records",
            120,
        )
        kafka.set_topic_config(output, {"max.message.bytes": str(_LIMIT)})
        later = produce("later")
        wait_for_query(
            query,
            lambda: len(kcat_read_committed(kafka.bootstrap_servers, output)) >= 1200,
            "the records written after the limit was lowered",
            120,
        )
    finally:
        query.stop()
    assert query.exception() is None
    got = _committed_values(kafka, output)
    assert sorted(got) == sorted(first + later) and len(got) == 1200  # each once
