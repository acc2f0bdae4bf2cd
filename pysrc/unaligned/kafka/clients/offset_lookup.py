"""The driver's questions to Kafka (topics, topic ids, earliest / latest offsets, offsets by
timestamp), asked through a lost broker or a moved leader as Kafka's Java admin client asks.

:class:`OffsetLookup` keeps one admin client for its life (the source runner keeps one for the
query's run) and sends its own requests on its connections
(:mod:`unaligned.kafka.clients.cluster_requests`): ``Metadata`` naming the subscribed topics
(all topics only for a pattern), which also gives the topic ids, and ``ListOffsets`` one request
per leader, each partition with its leader epoch. Asking again:

1. A partition answered with a retriable error (leader moved or fenced, leader epoch unknown,
   offset not yet available, a connection refused or timed out) is asked again after its
   topic's metadata is refreshed, with a doubling backoff (:class:`~unaligned.kafka.clients.
   retries.Backoff`), until ``kafka.default.api.timeout.ms`` (60 s) has passed since the
   question was first asked; each request is bounded by ``kafka.request.timeout.ms``. Only
   then does the question fail, with :class:`~unaligned.errors.KafkaUnavailableError`.
2. Any other error (not authorised, ...) is asked again ``fetchOffset.numRetries`` times,
   ``fetchOffset.retryIntervalMs`` apart, as Spark's source does; the client is replaced first.

:meth:`OffsetLookup.confirm_topics` asks for named topics directly, never creating one: a
listing of every topic can leave out a topic that exists (a broker with stale metadata).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient

from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.clients.client_options import KafkaClientConfig, kafka_python_kwargs
from unaligned.kafka.clients.cluster_requests import (
    EARLIEST,
    LATEST,
    TopicAnswer,
    leader_and_epoch,
    list_offsets,
    topic_metadata,
    topics_of,
)
from unaligned.kafka.clients.retries import Backoff, call_until, remaining_ms
from unaligned.kafka.clients.socket_login import explain_bootstrap_failure
from unaligned.kafka.partitions import TopicPartitionId

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _PartitionsLeft(kafka_errors.RetriableError):  # type: ignore[misc]
    """Some partitions are still to be asked again (the last error of one of them inside)."""


class OffsetLookup:
    """Driver-side broker questions on one admin client (created on first use; see the module
    docstring for how each is asked again)."""

    def __init__(
        self, config: KafkaClientConfig, attempts: int = 3, retry_interval_ms: int = 1000
    ) -> None:
        self._config = config
        self._attempts = max(1, attempts)
        self._retry_interval_s = retry_interval_ms / 1000.0
        self._admin: KafkaAdminClient | None = None
        self._ids: dict[str, str] = {}
        """Topic ids of the last ``Metadata`` answer that named each topic."""

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the live client (a copy connects again on first use)."""
        return {**self.__dict__, "_admin": None}

    # --- the client ---------------------------------------------------------------------------

    def _manager(self) -> Any:
        if self._admin is None:
            kwargs = kafka_python_kwargs(
                self._config.consumer_kwargs(), KafkaAdminClient.DEFAULT_CONFIG
            )
            try:
                self._admin = KafkaAdminClient(**kwargs)
            except kafka_errors.KafkaTimeoutError as exc:  # bootstrap: no broker answered
                consumer = self._config.consumer_kwargs()
                explain_bootstrap_failure(consumer, self._config.request_timeout_ms / 1000)
                raise kafka_errors.NodeNotReadyError(f"bootstrap: {exc}") from exc
        return connection_manager(self._admin)

    def _discard(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # closing a broken client must not hide the real error
                logger.debug("closing a failed Kafka admin client raised", exc_info=True)

    def _ask(self, doing: str, attempt: Callable[[float], T]) -> T:
        """``attempt(deadline)`` asked again on retriable errors until the API timeout (step 1
        of the module docstring), and on other Kafka errors ``fetchOffset.numRetries`` times
        (step 2)."""
        for tries in range(1, self._attempts + 1):
            try:
                return call_until(
                    attempt,
                    doing=doing,
                    servers=self._config.bootstrap_servers,
                    timeout_ms=self._config.api_timeout_ms,
                    backoff=Backoff(self._config.consumer_kwargs()["retry_backoff_ms"] / 1000),
                )
            except KafkaUnavailableError:
                self._discard()
                raise
            except kafka_errors.KafkaError as exc:
                self._discard()
                if tries == self._attempts:
                    raise
                logger.warning(
                    "attempt %d of %d %s on %s failed: %r; retrying",
                    tries,
                    self._attempts,
                    doing,
                    self._config.bootstrap_servers,
                    exc,
                )
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable")

    def _metadata(self, topics: Collection[str] | None, deadline: float) -> dict[str, TopicAnswer]:
        timeout_ms = remaining_ms(deadline, self._config.request_timeout_ms)
        manager = self._manager()
        try:
            answers: dict[str, TopicAnswer] = manager.run(
                topic_metadata, manager, topics, timeout_ms
            )
        except kafka_errors.KafkaError:
            self._discard()  # its connections or metadata may be stale: a new client next time
            raise
        self._ids.update({t: a.topic_id for t, a in answers.items() if a.topic_id is not None})
        return answers

    # --- the questions ------------------------------------------------------------------------

    def topics(self, names: Collection[str] | None = None) -> dict[str, list[int]]:
        """The partition numbers of each topic of ``names`` that exists (``None``: every
        non-internal topic), from one ``Metadata`` request; their topic ids are kept for
        :meth:`topic_ids`."""

        def attempt(deadline: float) -> dict[str, list[int]]:
            answers = self._metadata(names, deadline)
            listed = {}
            for topic, answer in answers.items():
                if answer.error is kafka_errors.NoError:
                    listed[topic] = list(answer.partitions)
                elif answer.error is not kafka_errors.UnknownTopicOrPartitionError:
                    if issubclass(answer.error, kafka_errors.RetriableError):
                        raise answer.error(topic)
                    logger.warning("listing topic %s: the broker answered %s", topic, answer.error)
            return listed

        return self._ask("listing topics", attempt)

    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        """Kafka's topic id (KIP-516) of each of ``names`` that exists: from the last
        :meth:`topics` answer that named it, else from a ``Metadata`` request for the rest."""
        wanted = sorted(set(names))
        missing = [t for t in wanted if t not in self._ids]
        if missing:
            self._ask("looking up topic ids", lambda deadline: self._metadata(missing, deadline))
        return {t: self._ids[t] for t in wanted if t in self._ids}

    def confirm_topics(self, names: Iterable[str]) -> dict[str, tuple[int, ...] | None]:
        """Ask the broker directly (a metadata request for exactly these topics) whether each
        exists: ``None`` when it answers UNKNOWN_TOPIC_OR_PARTITION, its partition numbers when
        it answers without error; a topic answered with any other error is left out (no clear
        answer). Used to confirm a deletion that a listing of every topic suggested."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        answers = self._ask("describing topics", lambda deadline: self._metadata(wanted, deadline))
        return confirmed(answers, wanted)

    def earliest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        """Log start offsets (the first offset still stored); a partition that does not exist
        is left out."""
        found = self._offsets("looking up earliest offsets", dict.fromkeys(tps, EARLIEST))
        return {tp: int(offset) for tp, offset in found.items() if offset is not None}

    def latest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        """End offsets; the last stable offsets with ``read_committed``; a partition that does
        not exist is left out."""
        found = self._offsets("looking up latest offsets", dict.fromkeys(tps, LATEST))
        return {tp: int(offset) for tp, offset in found.items() if offset is not None}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, int | None]:
        """First offset whose timestamp is >= the given one, or ``None`` when there is none."""
        return self._offsets("looking up offsets by timestamp", dict(timestamps))

    def _offsets(
        self, doing: str, timestamps: Mapping[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, int | None]:
        """``ListOffsets`` rounds until every partition is answered (step 1): the partitions
        left after a round have their topics' metadata refreshed before the next. A partition
        that metadata says does not exist (its topic unknown, or without it) is left out of the
        answer."""
        found: dict[TopicPartitionId, int | None] = {}
        stale: set[str] = set()
        gone: set[TopicPartitionId] = set()

        def attempt(deadline: float) -> dict[TopicPartitionId, int | None]:
            left = {tp: ts for tp, ts in timestamps.items() if tp not in found and tp not in gone}
            if not left:
                return found
            manager = self._manager()
            unknown = {tp.topic for tp in left if leader_and_epoch(manager, tp)[0] is None}
            if stale or unknown:
                answers = self._metadata(sorted(stale | unknown), deadline)
                stale.clear()
                gone.update(tp for tp in left if _absent(answers.get(tp.topic), tp.partition))
                left = {tp: ts for tp, ts in left.items() if tp not in gone}
                if not left:
                    return found
            timeout_ms = remaining_ms(deadline, self._config.request_timeout_ms)
            answer = manager.run(
                list_offsets, manager, left, self._config.read_committed, timeout_ms
            )
            found.update(answer.found)
            if answer.retry:
                stale.update(topics_of(answer.retry))
                first = sorted(answer.retry)[0]
                raise _PartitionsLeft(
                    f"{len(answer.retry)} partition(s) to ask again, e.g. {first}: "
                    f"{answer.retry[first]!r}"
                )
            return found

        if not timestamps:
            return {}
        return self._ask(doing, attempt)

    def close(self) -> None:
        self._discard()


def confirmed(
    answers: Mapping[str, TopicAnswer], wanted: Iterable[str]
) -> dict[str, tuple[int, ...] | None]:
    """What a ``Metadata`` answer for ``wanted`` confirms: a topic's partitions (no error),
    ``None`` (UNKNOWN_TOPIC_OR_PARTITION: it does not exist); a topic with any other answer, or
    none, is left out (no clear answer)."""
    out: dict[str, tuple[int, ...] | None] = {}
    for name in sorted(set(wanted)):
        answer = answers.get(name)
        if answer is None:
            continue
        if answer.error is kafka_errors.NoError:
            out[name] = answer.partitions
        elif answer.error is kafka_errors.UnknownTopicOrPartitionError:
            out[name] = None
        else:
            logger.warning("describing topic %s: the broker answered %s", name, answer.error)
    return out


def _absent(answer: TopicAnswer | None, partition: int) -> bool:
    """Whether a ``Metadata`` answer says the partition does not exist."""
    if answer is None:
        return False
    if answer.error is kafka_errors.UnknownTopicOrPartitionError:
        return True
    return answer.error is kafka_errors.NoError and partition not in answer.partitions
