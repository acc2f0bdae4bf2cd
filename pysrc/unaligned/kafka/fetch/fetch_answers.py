"""A read task's fetches as data: what it asks per partition (:class:`FetchWanted`), with which
settings (:class:`FetchSettings`, :func:`fetch_settings`), and what one partition's answer
means (:func:`read_answer` -> :class:`FetchAnswer`), for both kinds of ``Fetch`` response (the
own v11 parser's and kafka-python's: the same field names).

Answer rules, as Kafka's Java consumer (``FetchCollector``) reads them:

- records: the batches, the aborted transactions (read_committed), log start and high
  watermark, and the preferred read replica the leader names (KIP-392; -1: none);
- ``NOT_LEADER_OR_FOLLOWER``, ``REPLICA_NOT_AVAILABLE``, ``KAFKA_STORAGE_ERROR``,
  ``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH``, ``OFFSET_NOT_AVAILABLE``,
  ``LEADER_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PARTITION`` and every other retriable error:
  retriable, after new metadata;
- ``OFFSET_OUT_OF_RANGE``: retriable when it came from a preferred read replica (read from the
  leader); from the leader it is not, and the reader asks the leader's offsets before it calls
  anything lost (:mod:`unaligned.source.lost_records`);
- anything else: not retriable (the reader raises it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors

from unaligned.kafka.clients.retries import is_retriable
from unaligned.kafka.partitions import TopicPartitionId

_RETRIABLE_PARTITION_ERRORS = (
    kafka_errors.NotLeaderForPartitionError,
    kafka_errors.LeaderNotAvailableError,
    kafka_errors.UnknownTopicOrPartitionError,
    kafka_errors.KafkaStorageError,
)


@dataclass(frozen=True)
class FetchWanted:
    """One partition of a fetch: read from ``offset`` (next offset to read), at most
    ``max_bytes`` (the broker still returns a first batch larger than that)."""

    tp: TopicPartitionId
    offset: int
    max_bytes: int


@dataclass(frozen=True)
class FetchAnswer:
    """One partition's answer. ``error`` is ``None`` or a kafka-python error instance;
    ``retriable`` says whether asking again may help. ``leader_epoch``: the leader epoch the
    request carried (-1: unknown)."""

    tp: TopicPartitionId
    records: bytes = b""
    aborted_transactions: Sequence[Any] = ()
    log_start_offset: int = -1
    high_watermark: int = -1
    error: BaseException | None = None
    retriable: bool = False
    leader_epoch: int = -1


@dataclass(frozen=True)
class FetchSettings:
    """What every request of a task carries (from the consumer options): ``rack_id`` is
    ``kafka.client.rack``; a preferred read replica is used for ``replica_ttl_s`` at most."""

    read_committed: bool
    max_wait_ms: int
    request_timeout_ms: int
    max_bytes: int
    rack_id: str = ""
    replica_ttl_s: float = 300.0


def read_answer(
    tp: TopicPartitionId, data: Any, top_error: type, leader_epoch: int, from_replica: bool
) -> tuple[FetchAnswer, int]:
    """One partition's answer (module docstring) and the preferred read replica it names
    (-1: none). ``leader_epoch``: the epoch the request carried; ``from_replica``: it went to a
    preferred read replica, not the leader."""
    error_type = kafka_errors.for_code(int(data.error_code))
    if error_type is kafka_errors.NoError and top_error is not kafka_errors.NoError:
        error_type = top_error
    if error_type is kafka_errors.NoError:
        replica = getattr(data, "preferred_read_replica", -1)
        answer = FetchAnswer(
            tp,
            records=bytes(data.records or b""),
            aborted_transactions=tuple(data.aborted_transactions or ()),
            log_start_offset=int(data.log_start_offset),
            high_watermark=int(data.high_watermark),
            leader_epoch=leader_epoch,
        )
        return answer, -1 if replica is None else int(replica)
    retriable = (
        issubclass(error_type, _RETRIABLE_PARTITION_ERRORS)
        or is_retriable(error_type)
        or (from_replica and error_type is kafka_errors.OffsetOutOfRangeError)
    )
    answer = FetchAnswer(
        tp,
        log_start_offset=int(data.log_start_offset),
        high_watermark=int(data.high_watermark),
        error=error_type(str(tp)),
        retriable=retriable,
        leader_epoch=leader_epoch,
    )
    return answer, -1


def fetch_settings(consumer_kwargs: Mapping[str, Any], read_committed: bool) -> FetchSettings:
    """The request settings of a task from its consumer options (``kafka.fetch.max.wait.ms``,
    ``kafka.fetch.max.bytes``, ``kafka.request.timeout.ms``, ``kafka.client.rack``,
    ``kafka.metadata.max.age.ms``)."""
    return FetchSettings(
        read_committed=read_committed,
        max_wait_ms=int(consumer_kwargs.get("fetch_max_wait_ms", 500)),
        request_timeout_ms=int(consumer_kwargs.get("request_timeout_ms", 30_000)),
        max_bytes=int(consumer_kwargs.get("fetch_max_bytes", 64 * 1024 * 1024)),
        rack_id=str(consumer_kwargs.get("client_rack") or ""),
        replica_ttl_s=int(consumer_kwargs.get("metadata_max_age_ms", 300_000)) / 1000,
    )
