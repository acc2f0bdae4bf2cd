"""The Kafka sink's task writer on the real broker (encoded batches), read back by kcat
(librdkafka) with ``isolation.level=read_committed``.

The Spark end-to-end tests (test_kafka_sink.py, test_sink_crash_matrix.py) run over the same
path; here each chunk's rows are checked record by record: every
record exactly once, with its key, value, headers and partition, in input order per partition.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from kafka.errors import MessageSizeTooLargeError
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from harness import kcat_read_committed, wait_until, write_one_transaction
from unaligned.errors import TransactionWriteError
from unaligned.kafka.produce.partitioner import murmur2
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_task_writer import KafkaTaskWriter
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("headers", ArrayType(_HEADER)),
    ]
)
_ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _target(kafka: EmbeddedKafka, **options: str) -> KafkaTarget:
    target = SinkOptions.parse(
        {
            "checkpointlocation": "/unused",
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            **options,
        }
    ).target
    assert isinstance(target, KafkaTarget)
    return target


def _chunk(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    keys, values, topics, partitions, headers = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.string()),
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(headers, _ARROW_HEADERS),
        ],
        names=["key", "value", "topic", "partition", "headers"],
    )


def _write(
    kafka: EmbeddedKafka, chunks: list[pa.RecordBatch], **options: str
) -> tuple[KafkaTaskWriter, int]:
    """Write ``chunks`` in one task transaction, prepare it and commit it from its handle."""
    target = _target(kafka, **options)
    return write_one_transaction(target, _SCHEMA, chunks, f"it-fast-{uuid.uuid4().hex[:8]}")


def _committed(kafka: EmbeddedKafka, topic: str) -> list[dict[str, Any]]:
    wait_until(lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic), f"{topic} LSO")
    return kcat_read_committed(kafka.bootstrap_servers, topic)


def _rows(topics: list[str], count: int, partitions: int) -> Iterator[tuple[Any, ...]]:
    for i in range(count):
        key = None if i % 7 == 0 else f"k{i % 50}".encode()
        partition = i % partitions if i % 5 == 0 else None
        headers = [("h", f"{i}".encode()), ("h", b"again")] if i % 3 else None
        yield key, f"v{i}", topics[i % len(topics)], partition, headers


def _check(
    kafka: EmbeddedKafka, topics: list[str], rows: list[tuple[Any, ...]], partitions: int
) -> None:
    got = {topic: _committed(kafka, topic) for topic in topics}
    for topic in topics:
        expected = [r for r in rows if r[2] == topic]
        records = got[topic]
        assert sorted(r["value"] for r in records) == sorted(r[1] for r in expected)  # once each
        by_value = {r["value"]: r for r in records}
        per_partition: dict[int, list[str]] = defaultdict(list)
        for key, value, _, partition, headers in expected:
            record = by_value[value]
            assert record["key"] == (None if key is None else key.decode())
            assert record["headers"] == [(k, v.decode()) for k, v in headers or []]
            if partition is not None:
                assert record["partition"] == partition
            elif key is not None:
                assert record["partition"] == (murmur2(key) & 0x7FFFFFFF) % partitions
            per_partition[record["partition"]].append(value)
        for partition, values in per_partition.items():
            in_log = [r["value"] for r in sorted(records, key=lambda r: r["offset"])]
            assert [v for v in in_log if by_value[v]["partition"] == partition] == values


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_fast_path_writes_every_record_once_with_key_value_headers_and_partition(
    kafka: EmbeddedKafka, new_topic: TopicFactory, compression: str
) -> None:
    topics = [new_topic(partitions=3), new_topic(partitions=3)]
    rows = list(_rows(topics, 3000, 3))
    chunks = [_chunk(rows[i : i + 700]) for i in range(0, len(rows), 700)]
    writer, count = _write(
        kafka,
        chunks,
        **{"kafka.compression.type": compression, "kafka.batch.size": "4096"},
    )
    assert count == len(rows)
    _check(kafka, topics, rows, 3)


def test_unacknowledged_bytes_count_the_payload_of_encoded_batches(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=2)
    rows = [(b"key", "x" * 100, topic, i % 2, [("hd", b"12345")]) for i in range(10)]
    target = _target(kafka, **{"kafka.linger.ms": "60000"})
    writer = KafkaTaskWriter(
        target, kafka_columns(_SCHEMA, target), target.client_kwargs(), f"it-{uuid.uuid4()}", 0
    )
    try:
        writer.begin()
        writer.write_chunk(_chunk(rows))
        # Each record: 3 key + 100 value + 2 header key + 5 header value bytes; 0 once acked.
        assert 0 <= writer._writer.unacknowledged_bytes() <= 10 * (3 + 100 + 2 + 5)
        writer._writer.flush(timeout_s=60)
        assert writer._writer.unacknowledged_bytes() == 0
        writer.abort()
    finally:
        writer.close()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_batches_stay_within_the_topics_max_message_bytes(
    kafka: EmbeddedKafka, new_topic: TopicFactory, compression: str
) -> None:
    """batch.size (1 MiB by default) above the topic's max.message.bytes: every batch is cut
    to the topic's limit, so the broker takes them all (kafka-python would otherwise re-split a
    refused prebuilt batch, and the transaction would never prepare)."""
    topic = new_topic(partitions=2, config={"max.message.bytes": "20000"})
    rows = [(None, f"{i:06d}" + uuid.uuid4().hex * 4, topic, i % 2, None) for i in range(4000)]
    options = {"kafka.compression.type": compression}
    chunks = [_chunk(rows[i : i + 1500]) for i in range(0, len(rows), 1500)]
    done: list[tuple[KafkaTaskWriter, int]] = []
    # In a daemon thread: a refused batch re-split without end would hang prepare() (its flush).
    worker = threading.Thread(target=lambda: done.append(_write(kafka, chunks, **options)))
    worker.daemon = True
    worker.start()
    worker.join(timeout=120)
    assert done, "the transaction did not prepare within 120 s: a refused batch is re-split"
    writer, count = done[0]
    assert count == len(rows)
    _check(kafka, [topic], rows, 2)


def test_a_record_larger_than_the_topics_max_message_bytes_is_refused_by_name(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    """Refused while encoding (the cause is the encoder's MessageSizeTooLargeError), before
    anything is sent: not by the broker, after delivery.timeout.ms of re-splitting."""
    topic = new_topic(partitions=1, config={"max.message.bytes": "20000"})
    rows = [(None, "small", topic, 0, None), (None, "x" * 30_000, topic, 0, None)]
    with pytest.raises(TransactionWriteError, match=r"max\.message\.bytes=20000") as refused:
        _write(kafka, [_chunk(rows)])
    assert isinstance(refused.value.__cause__, MessageSizeTooLargeError)
