"""Connections to Kafka from a validated :class:`KafkaClientConfig`, with bounded waits.

:func:`open_consumer` gives a connected ``KafkaConsumer`` (no subscription), :func:`build_producer`
a ``KafkaProducer`` (from sink kwargs:
:func:`unaligned.kafka.clients.producer_options.producer_kwargs`); :class:`OffsetLookup`
answers the driver's broker queries (topics, earliest / latest offsets, offsets by timestamp) on
one long-lived consumer, retrying failed calls, and confirms whether topics exist with a direct
metadata request (:meth:`OffsetLookup.confirm_topics`). The ``kafka.*`` options behind the config
are mapped by :mod:`unaligned.kafka.clients.client_options`.

Bounded time: every broker round trip is bounded by ``kafka.request.timeout.ms`` (default
30000 ms); connecting to an unreachable cluster fails with :class:`KafkaUnavailableError`
naming the bootstrap servers after that long.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors
from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_internals import (
    consumer_cluster,
    give_consumer_metadata_retry_backoff,
    give_metadata_retry_backoff,
)
from unaligned.kafka.clients.client_options import KafkaClientConfig
from unaligned.kafka.partitions import TopicPartitionId

logger = logging.getLogger(__name__)

T = TypeVar("T")


_UNAVAILABLE = (
    kafka_errors.KafkaTimeoutError,
    kafka_errors.KafkaConnectionError,
    kafka_errors.BrokerNotAvailableError,
    kafka_errors.MetadataEmptyBrokerList,
    kafka_errors.RequestTimedOutError,
    kafka_errors.NodeNotReadyError,
)


def unavailable(config: KafkaClientConfig, doing: str, exc: BaseException) -> KafkaUnavailableError:
    return KafkaUnavailableError(
        f"Kafka at {config.bootstrap_servers} could not be reached while {doing} "
        f"(within kafka.request.timeout.ms={config.request_timeout_ms}): {exc!r}"
    )


def open_consumer(config: KafkaClientConfig) -> KafkaConsumer:
    """A connected ``KafkaConsumer`` (no subscription), or :class:`KafkaUnavailableError` after
    at most ``kafka.request.timeout.ms``."""
    kwargs = config.consumer_kwargs()
    try:
        consumer = KafkaConsumer(**kwargs)
    except _UNAVAILABLE as exc:
        raise unavailable(config, "connecting", exc) from exc
    give_consumer_metadata_retry_backoff(consumer, kwargs["retry_backoff_ms"])
    return consumer


class OffsetLookup:
    """Driver-side broker queries on one long-lived consumer (created on first use).

    Failed calls are retried (``fetchOffset.numRetries`` attempts, ``fetchOffset.retryIntervalMs``
    apart) within one ``kafka.request.timeout.ms`` budget; a consumer that failed is replaced.
    With ``kafka.isolation.level=read_committed``, :meth:`latest` gives last stable offsets.
    """

    def __init__(
        self, config: KafkaClientConfig, attempts: int = 3, retry_interval_ms: int = 1000
    ) -> None:
        self._config = config
        self._attempts = max(1, attempts)
        self._retry_interval_s = retry_interval_ms / 1000.0
        self._consumer: KafkaConsumer | None = None
        self._admin: KafkaAdminClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the live clients (a copy connects again on first use)."""
        return {**self.__dict__, "_consumer": None, "_admin": None}

    def _client(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = open_consumer(self._config)
        return self._consumer

    def _discard(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close(timeout_ms=1000)
            except Exception:  # closing a broken client must not hide the real error
                logger.debug("closing a failed Kafka consumer raised", exc_info=True)

    def _admin_client(self) -> KafkaAdminClient:
        if self._admin is None:
            kwargs = {
                k: v
                for k, v in self._config.consumer_kwargs().items()
                if k in KafkaAdminClient.DEFAULT_CONFIG
            }
            try:
                self._admin = KafkaAdminClient(**kwargs)
            except _UNAVAILABLE as exc:
                raise unavailable(self._config, "connecting", exc) from exc
        return self._admin

    def _discard_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # closing a broken client must not hide the real error
                logger.debug("closing a failed Kafka admin client raised", exc_info=True)

    def _call(
        self,
        doing: str,
        fn: Callable[[KafkaConsumer, int], T],
        client: Callable[[], Any] | None = None,
    ) -> T:
        """``fn(client, remaining ms)`` with retries; ``client`` defaults to the consumer."""
        get_client = self._client if client is None else client
        discard = self._discard if client is None else self._discard_admin
        budget_s = self._config.request_timeout_ms / 1000.0
        deadline = time.monotonic() + budget_s
        for attempt in range(1, self._attempts + 1):
            remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                return fn(get_client(), remaining_ms)
            except KafkaUnavailableError:
                raise
            except kafka_errors.KafkaError as exc:
                discard()
                out_of_time = time.monotonic() + self._retry_interval_s >= deadline
                if attempt == self._attempts or out_of_time:
                    if isinstance(exc, _UNAVAILABLE):
                        raise unavailable(self._config, doing, exc) from exc
                    raise
                logger.warning(
                    "attempt %d of %d %s on %s failed: %r; retrying",
                    attempt,
                    self._attempts,
                    doing,
                    self._config.bootstrap_servers,
                    exc,
                )
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable")

    def topics(self) -> dict[str, list[int]]:
        """Every non-internal topic with its partition numbers, from fresh metadata."""

        def fetch(consumer: KafkaConsumer, _timeout_ms: int) -> dict[str, list[int]]:
            names = consumer.topics()  # refreshes metadata of all topics
            return {t: sorted(consumer.partitions_for_topic(t) or ()) for t in names}

        return self._call("listing topics", fetch)

    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        """Kafka's topic id (KIP-516) of each of ``names`` that exists, from fresh metadata;
        topics the broker gives no id for are left out."""
        wanted = sorted(set(names))
        if not wanted:
            return {}

        def fetch(consumer: KafkaConsumer, _timeout_ms: int) -> dict[str, str]:
            consumer.topics()  # refreshes metadata of all topics, ids included
            cluster = consumer_cluster(consumer)
            ids = {t: cluster.topic_id(t) for t in wanted}
            return {t: str(i) for t, i in ids.items() if i is not None}

        return self._call("looking up topic ids", fetch)

    def confirm_topics(self, names: Iterable[str]) -> dict[str, tuple[int, ...] | None]:
        """Ask the broker directly (a metadata request for exactly these topics, never
        creating one) whether each topic exists: ``None`` when it answers
        UNKNOWN_TOPIC_OR_PARTITION (the topic does not exist), its partition numbers when it
        answers without error. A topic answered with any other error (leader not available,
        not authorized, ...) is left out: no clear answer.

        Used to confirm a deletion that one listing of every topic (:meth:`topics`) suggested:
        such a listing can leave out a topic that still exists."""
        wanted = sorted(set(names))
        if not wanted:
            return {}

        def describe(admin: KafkaAdminClient, _timeout_ms: int) -> list[dict[str, Any]]:
            return list(admin.describe_topics(wanted))

        described = self._call("describing topics", describe, self._admin_client)
        out: dict[str, tuple[int, ...] | None] = {}
        for topic in described:
            name = topic.get("name")
            if name not in wanted:
                continue
            error = kafka_errors.for_code(int(topic.get("error_code", 0)))
            if error is kafka_errors.NoError:
                out[name] = tuple(
                    sorted(int(p["partition_index"]) for p in topic.get("partitions", ()))
                )
            elif error is kafka_errors.UnknownTopicOrPartitionError:
                out[name] = None
            else:
                logger.warning("describing topic %s: the broker answered %s", name, error.__name__)
        return out

    def earliest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        """Log start offsets (the first offset still stored)."""
        wanted = [KafkaTopicPartition(tp.topic, tp.partition) for tp in tps]
        if not wanted:
            return {}
        found = self._call(
            "looking up earliest offsets",
            lambda c, ms: c.beginning_offsets(wanted, timeout_ms=ms),
        )
        return {TopicPartitionId(k.topic, k.partition): int(v) for k, v in found.items()}

    def latest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        """End offsets; the last stable offsets with ``read_committed``."""
        wanted = [KafkaTopicPartition(tp.topic, tp.partition) for tp in tps]
        if not wanted:
            return {}
        found = self._call(
            "looking up latest offsets",
            lambda c, ms: c.end_offsets(wanted, timeout_ms=ms),
        )
        return {TopicPartitionId(k.topic, k.partition): int(v) for k, v in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, int | None]:
        """First offset whose timestamp is >= the given one, or ``None`` when there is none."""
        wanted = {KafkaTopicPartition(tp.topic, tp.partition): ts for tp, ts in timestamps.items()}
        if not wanted:
            return {}
        found = self._call(
            "looking up offsets by timestamp",
            lambda c, ms: c.offsets_for_times(dict(wanted), timeout_ms=ms),
        )
        out: dict[TopicPartitionId, int | None] = {}
        for k in wanted:
            hit = found.get(k)
            out[TopicPartitionId(k.topic, k.partition)] = None if hit is None else int(hit.offset)
        return out

    def close(self) -> None:
        self._discard()
        self._discard_admin()


def build_producer(kwargs: Mapping[str, Any]) -> KafkaProducer:
    """A ``KafkaProducer``; bootstrap (bounded by ``bootstrap_timeout_ms``) failing raises
    :class:`KafkaUnavailableError` naming the bootstrap servers.

    kafka-python 3.0.12 builds the producer's cluster metadata without ``retry_backoff_ms``, so a
    topic's metadata, asked for right after bootstrap, waited out the default 100 ms: this sets
    the producer's own value there (the private ``_metadata.config``, pinned by
    ``tests/kafka/clients/test_connections.py``)."""
    try:
        producer = KafkaProducer(**kwargs)
    except kafka_errors.KafkaTimeoutError as exc:
        raise KafkaUnavailableError(
            f"could not reach Kafka at {describe_servers(kwargs)}: {exc!r}"
        ) from exc
    give_metadata_retry_backoff(producer)
    return producer


SettingsKey = tuple[tuple[str, str], ...]


def settings_key(client_kwargs: Mapping[str, Any]) -> SettingsKey:
    """``client_kwargs`` as a hashable key, for what a process keeps per cluster and settings."""
    return tuple(sorted((k, repr(v)) for k, v in client_kwargs.items()))


def describe_servers(client_kwargs: Mapping[str, Any]) -> str:
    """The bootstrap servers of ``client_kwargs`` as one string, for error messages."""
    servers = client_kwargs.get("bootstrap_servers", "localhost")
    return ",".join(servers) if isinstance(servers, (list, tuple)) else str(servers)
