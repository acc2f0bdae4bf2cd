"""Records in and out of the embedded broker's topics, with kafka-python clients.

:class:`unaligned.testing.embedded_kafka.EmbeddedKafka` owns the clients' lifetimes and its
``produce`` / ``consume_all`` / end offset methods call these functions:

- :func:`send_and_wait` sends :data:`ProduceRecord` tuples (non-transactional, acks=all) and waits
  until the broker acknowledged every one;
- :func:`read_to_end` reads partitions from their first readable offset to their end offset at
  call time (exclusive end: the offset the next record will get), ordered by partition, then
  offset. With a read_committed consumer the end is the last stable offset and aborted records
  are never returned.

Every wait is bounded by the ``timeout_s`` the caller gives; a timeout or a failed send raises
:class:`unaligned.errors.EmbeddedKafkaError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from kafka.consumer.fetcher import ConsumerRecord

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from unaligned.errors import EmbeddedKafkaError

Header = tuple[str, bytes]
ProduceRecord = tuple[int | None, bytes | None, bytes | None, Sequence[Header] | None, int | None]
"""``(partition or None, key, value, headers or None, timestamp_ms or None)``."""


def new_producer(bootstrap_servers: str, timeout_s: float) -> KafkaProducer:
    """A non-transactional producer with acks=all, blocking at most ``timeout_s``."""
    return KafkaProducer(
        bootstrap_servers=bootstrap_servers,
        client_id="embedded-kafka-producer",
        acks="all",
        linger_ms=5,
        max_block_ms=int(timeout_s * 1000),
    )


def new_consumer(bootstrap_servers: str, isolation_level: str) -> KafkaConsumer:
    """A consumer with no group and no subscription (the caller assigns partitions)."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        client_id="embedded-kafka-consumer",
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation_level,
        request_timeout_ms=30000,
    )


def send_and_wait(
    producer: KafkaProducer, topic: str, records: Iterable[ProduceRecord], timeout_s: float
) -> None:
    """Send ``(partition, key, value, headers, timestamp_ms)`` records to ``topic`` and wait until
    the broker has acknowledged every one."""
    futures = []
    for partition, key, value, headers, timestamp_ms in records:
        futures.append(
            producer.send(
                topic,
                value=value,
                key=key,
                headers=list(headers) if headers else None,
                partition=partition,
                timestamp_ms=timestamp_ms,
            )
        )
    producer.flush(timeout=timeout_s)
    for future in futures:
        try:
            future.get(timeout=timeout_s)
        except Exception as exc:
            raise EmbeddedKafkaError(f"producing to topic {topic!r} failed: {exc!r}") from exc


def read_to_end(
    consumer: KafkaConsumer, topic: str, partitions: list[TopicPartition], timeout_s: float
) -> list[ConsumerRecord]:
    """Every record of ``partitions`` (of ``topic``) from the first readable offset to the end
    offset at call time, ordered by partition, then offset. The caller closes ``consumer``."""
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    ends = {tp: int(offset) for tp, offset in consumer.end_offsets(partitions).items()}
    by_partition: dict[int, list[ConsumerRecord]] = {tp.partition: [] for tp in partitions}
    deadline = time.monotonic() + timeout_s
    pending = {tp for tp in partitions if consumer.position(tp) < ends[tp]}
    while pending:
        if time.monotonic() > deadline:
            positions = {f"{tp.topic}-{tp.partition}": consumer.position(tp) for tp in pending}
            raise EmbeddedKafkaError(
                f"reading topic {topic!r} to its end offsets {ends} did not finish within "
                f"{timeout_s:.0f} s (positions {positions})"
            )
        for tp, batch in consumer.poll(timeout_ms=200).items():
            by_partition[tp.partition].extend(r for r in batch if r.offset < ends[tp])
        pending = {tp for tp in pending if consumer.position(tp) < ends[tp]}
    return [record for p in sorted(by_partition) for record in by_partition[p]]
