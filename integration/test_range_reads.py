"""A read task on the real broker, without Spark: several topic-partitions over one kept
client, exactly its ranges, fetch bounds from what is left, the broker stopped mid-read, a kept
connection closed under it, read_committed over an aborted transaction, data loss. The ranges
and the stopped broker run over both transports: the read path's own sockets (what a plaintext
cluster gets) and kafka-python's connections (what TLS and SASL get). Spark end to end is in
test_kafka_source.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from kafka.structs import TopicPartition as KafkaTopicPartition

from conftest import TopicFactory
from kafka import KafkaProducer
from unaligned.errors import DataLossError, KafkaUnavailableError
from unaligned.kafka.clients.admin_clients import shared_admin_client
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.fetch import fetch_connections, range_fetch
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source import partition_reader
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition, read_partition
from unaligned.source.planning.offset_ranges import OffsetRange
from unaligned.testing import EmbeddedKafka


@pytest.fixture(params=["own sockets", "kafka-python connections"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both transports of the fetches; the second is what TLS and SASL clusters use."""
    if request.param == "kafka-python connections":
        monkeypatch.setattr(partition_reader, "direct_connections", lambda *_: None)
    return str(request.param)


def task(kafka: EmbeddedKafka, ranges: list[OffsetRange], **options: str) -> KafkaInputPartition:
    parsed = SourceOptions.parse(
        {"subscribe": "x", "kafka.bootstrap.servers": kafka.bootstrap_servers, **options}
    )
    return KafkaInputPartition(
        index=0,
        ranges=tuple(ranges),
        kafka=parsed.kafka,
        include_headers=parsed.include_headers,
        fail_on_data_loss=parsed.fail_on_data_loss,
        poll_timeout_ms=parsed.poll_timeout_ms,
    )


def rows_of(batches: Iterator[pa.RecordBatch]) -> list[tuple[int, int, bytes]]:
    table = pa.Table.from_batches(list(batches))
    return list(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


def produce_values(kafka: EmbeddedKafka, topic: str, partition: int, count: int) -> None:
    now = int(time.time() * 1000)
    kafka.produce(
        topic, [(partition, None, b"p%d-%06d" % (partition, i), None, now) for i in range(count)]
    )


def expected(partition: int, start: int, end: int) -> list[tuple[int, int, bytes]]:
    return [(partition, i, b"p%d-%06d" % (partition, i)) for i in range(start, end)]


def test_one_task_reads_exactly_its_ranges_of_several_partitions_in_offset_order(
    kafka: EmbeddedKafka, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    topic = new_topic(partitions=3)
    for partition in range(3):
        produce_values(kafka, topic, partition, 3000)
    asked: list[int] = []
    original = range_fetch.RangeFetcher.answers

    def recording(self: Any, wanted: Any) -> Any:
        asked.extend(w.max_bytes for w in wanted)
        return original(self, wanted)

    monkeypatch.setattr(range_fetch.RangeFetcher, "answers", recording)
    ranges = [
        OffsetRange(TopicPartitionId(topic, 0), 100, 2900),
        OffsetRange(TopicPartitionId(topic, 1), 0, 0),  # empty: never fetched
        OffsetRange(TopicPartitionId(topic, 2), 1500, 1501),
    ]
    rows = rows_of(
        read_partition(task(kafka, ranges, **{"kafka.max.partition.fetch.bytes": "65536"}))
    )
    assert sorted(rows) == expected(0, 100, 2900) + expected(2, 1500, 1501)
    per_partition = [r[1] for r in rows if r[0] == 0]
    assert per_partition == sorted(per_partition)  # offset order within a partition
    assert asked and max(asked) <= 65536  # kafka.max.partition.fetch.bytes bounds every fetch


def test_the_broker_stopped_mid_read_costs_no_record_and_no_duplicate(
    kafka: EmbeddedKafka, new_topic: TopicFactory, transport: str
) -> None:
    """SIGSTOP for 4 s with a 1.5 s request timeout while a task reads two partitions in
    small fetches: the requests time out, are asked again, and every record arrives once."""
    topic = new_topic(partitions=2)
    for partition in range(2):
        produce_values(kafka, topic, partition, 4000)
    part = task(
        kafka,
        [OffsetRange(TopicPartitionId(topic, p), 0, 4000) for p in range(2)],
        **{"kafka.request.timeout.ms": "1500", "kafka.max.partition.fetch.bytes": "16384"},
    )
    resume = threading.Timer(4.0, os.kill, (kafka.broker_pid, signal.SIGCONT))
    rows: list[tuple[int, int, bytes]] = []
    stopped_at = 0
    try:
        for batch in read_partition(part):
            rows += rows_of(iter([batch]))
            if not stopped_at:
                stopped_at = len(rows)
                os.kill(kafka.broker_pid, signal.SIGSTOP)
                resume.start()
    finally:
        resume.cancel()
        os.kill(kafka.broker_pid, signal.SIGCONT)
    assert 0 < stopped_at < 8000
    assert sorted(rows) == expected(0, 0, 4000) + expected(1, 0, 4000)


def test_a_kept_connection_closed_under_the_reader_is_opened_again(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    """The process's own connection to the leader, kept from a first read, is closed behind
    its back: the next read's request fails on it, is retried on a new connection, and returns
    every record of its range once."""
    topic = new_topic(partitions=1)
    produce_values(kafka, topic, 0, 2000)
    tp = TopicPartitionId(topic, 0)
    first = task(kafka, [OffsetRange(tp, 0, 1000)])
    assert rows_of(read_partition(first)) == expected(0, 0, 1000)
    kwargs = first.kafka.consumer_kwargs()
    with shared_admin_client(kwargs) as admin:
        manager = connection_manager(admin)
        direct = fetch_connections.direct_connections(kwargs, manager.broker_version)
        assert direct is not None
        leader = manager.cluster.leader_for_partition(KafkaTopicPartition(topic, 0))
        kept = direct.connection(leader, manager.cluster.broker_metadata(leader))
    kept.close()  # the kept one: the first read left it open
    assert rows_of(read_partition(task(kafka, [OffsetRange(tp, 1000, 2000)]))) == expected(
        0, 1000, 2000
    )
    with shared_admin_client(kwargs) as admin:
        manager = connection_manager(admin)
        again = direct.connection(leader, manager.cluster.broker_metadata(leader))
    assert again is not kept  # the failed one was dropped, a new one kept


def test_read_committed_skips_an_aborted_transaction_and_ends_past_the_markers(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=1)
    producer = KafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers, transactional_id=f"{topic}-tx"
    )
    try:
        producer.init_transactions()
        for values, commit in (([b"a", b"b"], True), ([b"x", b"y", b"z"], False), ([b"c"], True)):
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value, partition=0)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    end = kafka.last_stable_offsets(topic)[0]
    part = task(
        kafka,
        [OffsetRange(TopicPartitionId(topic, 0), 0, end)],
        **{"kafka.isolation.level": "read_committed"},
    )
    assert [r[2] for r in rows_of(read_partition(part))] == [b"a", b"b", b"c"]


def test_records_deleted_below_the_range_are_data_loss_unless_allowed(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=1)
    produce_values(kafka, topic, 0, 50)
    kafka.delete_records(topic, 0, 20)
    tp = TopicPartitionId(topic, 0)
    with pytest.raises(DataLossError, match=rf"{topic}-0 at offsets \[5, 20\)"):
        list(read_partition(task(kafka, [OffsetRange(tp, 5, 50)])))
    allowed = task(kafka, [OffsetRange(tp, 5, 50)], failOnDataLoss="false")
    assert rows_of(read_partition(allowed)) == expected(0, 20, 50)


def test_a_range_past_the_log_end_fails_after_the_poll_timeout_naming_the_offsets(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=1)
    produce_values(kafka, topic, 0, 10)
    part = task(
        kafka,
        [OffsetRange(TopicPartitionId(topic, 0), 0, 15)],
        **{"kafkaConsumer.pollTimeoutMs": "1500", "kafka.fetch.max.wait.ms": "100"},
    )
    with pytest.raises((KafkaUnavailableError, DataLossError), match=rf"{topic}-0"):
        list(read_partition(part))
