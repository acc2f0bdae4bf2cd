"""``Fetch`` requests for offset ranges, sent on a kept admin client's connections.

A read task (:mod:`unaligned.source.partition_reader`) asks :class:`RangeFetcher` for the next
records of each of its topic-partitions: one ``Fetch`` request per broker it reads from, every
partition with its own byte bound (chosen from what is left of its range, so a task does not
receive records past its end), sent together and answered together. There is no
``KafkaConsumer`` per task: the worker process's kept admin client
(:func:`unaligned.kafka.clients.admin_clients.shared_admin_client`) gives the cluster metadata,
and the requests go over the process's own kept sockets on a plaintext cluster
(:mod:`unaligned.kafka.fetch.fetch_connections`, ``Fetch`` v11, answers read in place), else
over the admin client's connections (TLS, SASL).

Leaders and replicas, as Kafka's Java consumer does:

- every partition carries the leader epoch the metadata gives (KIP-320): a broker that lost
  the leadership answers ``FENCED_LEADER_EPOCH`` instead of serving a stale or lagging log, and
  one that has not learned the new epoch yet ``UNKNOWN_LEADER_EPOCH``;
- with ``kafka.client.rack`` set, the leader may name a preferred read replica (KIP-392, a
  broker ``replica.selector.class``): the partition is then read from that replica until
  ``kafka.metadata.max.age.ms`` passes or it answers anything but records (then the leader);
- :meth:`RangeFetcher.epoch_end_offsets` asks the leaders where their logs end for the epochs a
  task last read at (``OffsetsForLeaderEpoch``), for the truncation check after a leader change.

What comes back per partition is a :class:`~unaligned.kafka.fetch.fetch_answers.FetchAnswer`,
read by the rules of :mod:`unaligned.kafka.fetch.fetch_answers`; a partition answered with a
retriable error, or whose request failed whole (a lost connection, a timed-out request, a
broker the metadata no longer lists), has its leader looked up again (``Metadata``) before the
next request, and the caller asks again, bounded by ``kafkaConsumer.pollTimeoutMs``.

Versions: on kafka-python's connections ``Fetch`` v4 (isolation level, aborted transactions)
to v12 (topic names; v13 would need topic ids), as kafka-python's own fetcher caps them; on the
own connections v11. No incremental fetch sessions (``session_epoch`` -1). The connection
manager comes from :func:`unaligned.kafka.clients.client_internals.connection_manager` (a private
kafka-python name).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.structs import TopicPartition as KafkaTopicPartition

from unaligned.kafka.clients.cluster_requests import EpochEnd, epoch_end_offsets, leader_and_epoch
from unaligned.kafka.clients.retries import is_retriable
from unaligned.kafka.fetch.fetch_answers import (
    FetchAnswer,
    FetchSettings,
    FetchWanted,
    read_answer,
)
from unaligned.kafka.fetch.fetch_connections import FetchConnection, FetchConnections
from unaligned.kafka.fetch.fetch_wire import PartitionFetch
from unaligned.kafka.partitions import TopicPartitionId

FETCH_MIN_VERSION, FETCH_MAX_VERSION = 4, 12
#: On the own connections a request holds partitions while their byte bounds add up to at most
#: this: a task's large ranges get a request each, and the first answer is decoded while the
#: next ones arrive; small ones share one request.
REQUEST_BYTES = 1024 * 1024
_ROUND_BROKEN = kafka_errors.KafkaConnectionError("an earlier request of the round failed")


def _request_groups(parts: Sequence[FetchWanted]) -> list[list[FetchWanted]]:
    """``parts`` in order, cut into requests of at most :data:`REQUEST_BYTES` of bounds (at
    least one partition each). A partition whose last answer was cut off should come first in
    ``parts``: each group's first partition is the one the broker may answer beyond its bound."""
    groups: list[list[FetchWanted]] = []
    total = 0
    for w in parts:
        if groups and total + w.max_bytes <= REQUEST_BYTES:
            groups[-1].append(w)
            total += w.max_bytes
        else:
            groups.append([w])
            total = w.max_bytes
    return groups


@dataclass(frozen=True)
class _Target:
    """Where a partition's fetch goes this round: ``node`` (the leader, or ``replica``) and the
    leader epoch it carries."""

    node: int
    leader_epoch: int
    replica: bool


@dataclass
class RangeFetcher:
    """Fetches for one task on ``manager`` (a started admin client's connection manager: the
    cluster metadata, and the fetches themselves unless ``direct`` connections carry them)."""

    manager: Any
    settings: FetchSettings
    direct: FetchConnections | None = None
    _stale_topics: set[str] = field(default_factory=set)
    _replicas: dict[TopicPartitionId, tuple[int, float]] = field(default_factory=dict)
    """Preferred read replica of a partition (KIP-392) and until when to use it."""
    _targets: dict[TopicPartitionId, _Target] = field(default_factory=dict)
    """Where each partition of the current round was sent."""

    def leader_epoch(self, tp: TopicPartitionId) -> int:
        """The leader epoch the metadata gives for ``tp`` now (-1: unknown)."""
        return leader_and_epoch(self.manager, tp)[1]

    def epoch_end_offsets(
        self, epochs: Mapping[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, EpochEnd]:
        """One ``OffsetsForLeaderEpoch`` round to the current leaders (their metadata asked
        first): where each log ends for the epoch given; partitions without an answer are left
        out (asked again by the caller's next check), their topics marked stale."""
        self.manager.run(self._know_leaders_of, sorted({tp.topic for tp in epochs}))
        answers, retry = self.manager.run(
            epoch_end_offsets, self.manager, dict(epochs), self.settings.request_timeout_ms
        )
        self._stale_topics.update(tp.topic for tp in retry)
        return dict(answers)

    def answers(
        self, wanted: Sequence[FetchWanted]
    ) -> Iterator[tuple[TopicPartitionId, FetchAnswer]]:
        """One round: every partition of ``wanted`` fetched once (each request at most
        ``request.timeout.ms``). On the own connections the answers come as they arrive (a
        request per group of partitions whose bounds add up to :data:`REQUEST_BYTES`, all sent
        at once and read in order), so the caller decodes one while the next is on its way; on
        kafka-python's, all at once. Order: ``wanted``'s within a leader."""
        if self.direct is not None:
            yield from self._direct_answers(wanted)
            return
        answers: dict[TopicPartitionId, FetchAnswer] = self.manager.run(self._round, wanted)
        yield from answers.items()

    async def _round(self, wanted: Sequence[FetchWanted]) -> dict[TopicPartitionId, FetchAnswer]:
        await self._know_leaders(wanted)
        answers, by_leader = self._by_leader(wanted)
        timeout_ms = self.settings.request_timeout_ms
        pending = []
        for node, parts in by_leader.items():
            try:
                future = self.manager.send(
                    self._request(parts), node_id=node, request_timeout_ms=timeout_ms
                )
            except kafka_errors.KafkaError as exc:  # a broker the metadata no longer lists
                answers.update(self._failed(parts, exc))
                continue
            pending.append((parts, future))
        for parts, future in pending:
            try:
                response = await future
            except kafka_errors.KafkaError as exc:
                answers.update(self._failed(parts, exc))
                continue
            answers.update(self._answers(parts, response))
        return answers

    def _direct_answers(
        self, wanted: Sequence[FetchWanted]
    ) -> Iterator[tuple[TopicPartitionId, FetchAnswer]]:
        """:meth:`answers` over the own connections. Each connection is locked from the first
        request of the round to its last answer; one left with answers unread (the caller
        stopped early, or an answer failed) is closed."""
        direct = self.direct
        assert direct is not None
        if self._stale_topics or self._unknown(wanted):
            self.manager.run(self._know_leaders, wanted)
        early, by_leader = self._by_leader(wanted)
        yield from early.items()
        held: dict[int, FetchConnection] = {}
        broken: set[int] = set()
        sent: deque[tuple[int, list[FetchWanted], int]] = deque()
        try:
            for node, parts in by_leader.items():
                groups = _request_groups(parts)
                for i, group in enumerate(groups):
                    try:
                        conn = held.get(node) or self._hold(direct, node, held)
                        request_id = conn.request(
                            self._direct_topics(group),
                            max_wait_ms=self.settings.max_wait_ms,
                            max_bytes=self.settings.max_bytes,
                            read_committed=self.settings.read_committed,
                        )
                    except kafka_errors.KafkaError as exc:
                        broken.add(node)  # its requests sent before are answered as failed
                        unsent = [w for g in groups[i:] for w in g]
                        yield from self._failed(unsent, exc).items()
                        break
                    sent.append((node, group, request_id))
            while sent:
                node, group, request_id = sent.popleft()
                if node in broken:
                    yield from self._failed(group, _ROUND_BROKEN).items()
                    continue
                deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
                try:
                    response = held[node].answer(request_id, deadline)
                except kafka_errors.KafkaError as exc:
                    broken.add(node)
                    yield from self._failed(group, exc).items()
                    continue
                yield from self._answers(group, response).items()
        finally:
            unread = {node for node, _, _ in sent} | broken
            for node, conn in held.items():
                conn.lock.release()
                if node in unread:
                    direct.drop(node)

    def _hold(
        self, direct: FetchConnections, node: int, held: dict[int, FetchConnection]
    ) -> FetchConnection:
        conn = direct.connection(node, self.manager.cluster.broker_metadata(node))
        conn.lock.acquire()
        held[node] = conn
        return conn

    def _unknown(self, wanted: Sequence[FetchWanted]) -> list[FetchWanted]:
        cluster = self.manager.cluster
        return [
            w
            for w in wanted
            if cluster.leader_for_partition(KafkaTopicPartition(w.tp.topic, w.tp.partition))
            in (None, -1)
        ]

    async def _know_leaders(self, wanted: Sequence[FetchWanted]) -> None:
        """Ask for the leaders of stale topics, and of partitions whose leader is unknown."""
        if self._stale_topics:
            await self._refresh_metadata(sorted(self._stale_topics))
        unknown = self._unknown(wanted)
        if unknown:
            await self._refresh_metadata(sorted({w.tp.topic for w in unknown}))

    async def _know_leaders_of(self, topics: Sequence[str]) -> None:
        await self._refresh_metadata(topics)

    def _by_leader(
        self, wanted: Sequence[FetchWanted]
    ) -> tuple[dict[TopicPartitionId, FetchAnswer], dict[int, list[FetchWanted]]]:
        """``wanted`` by the node each is read from (its preferred read replica while it has a
        fresh one, else its leader; :attr:`_targets` records which); a partition without a
        known leader is answered (retriable) at once."""
        by_node: dict[int, list[FetchWanted]] = {}
        answers: dict[TopicPartitionId, FetchAnswer] = {}
        now = time.monotonic()
        self._targets = {}
        for w in wanted:
            leader, epoch = leader_and_epoch(self.manager, w.tp)
            if leader is None:
                self._stale_topics.add(w.tp.topic)
                answers[w.tp] = FetchAnswer(
                    w.tp, error=kafka_errors.LeaderNotAvailableError(str(w.tp)), retriable=True
                )
                continue
            replica, until = self._replicas.get(w.tp, (leader, 0.0))
            if until <= now:
                self._replicas.pop(w.tp, None)
                replica = leader
            target = _Target(replica, epoch, replica != leader)
            self._targets[w.tp] = target
            by_node.setdefault(target.node, []).append(w)
        return answers, by_node

    def _failed(
        self, parts: Sequence[FetchWanted], exc: kafka_errors.KafkaError
    ) -> dict[TopicPartitionId, FetchAnswer]:
        """Every partition of a request that failed as a whole (lost connection, timeout, a
        broker the metadata no longer lists): asked again, from the leader."""
        self._stale_topics.update(w.tp.topic for w in parts)
        for w in parts:
            self._replicas.pop(w.tp, None)
        return {
            w.tp: FetchAnswer(w.tp, error=exc, retriable=is_retriable(exc), leader_epoch=-1)
            for w in parts
        }

    def _epoch(self, tp: TopicPartitionId) -> int:
        target = self._targets.get(tp)
        return -1 if target is None else target.leader_epoch

    def _direct_topics(
        self, parts: Sequence[FetchWanted]
    ) -> list[tuple[str, list[PartitionFetch]]]:
        by_topic: dict[str, list[PartitionFetch]] = {}
        for w in parts:
            by_topic.setdefault(w.tp.topic, []).append(
                PartitionFetch(w.tp.partition, w.offset, w.max_bytes, self._epoch(w.tp))
            )
        return list(by_topic.items())

    def _request(self, parts: Sequence[FetchWanted]) -> Any:
        topic_type = FetchRequest.FetchTopic
        by_topic: dict[str, list[Any]] = {}
        for w in parts:
            by_topic.setdefault(w.tp.topic, []).append(
                topic_type.FetchPartition(
                    partition=w.tp.partition,
                    current_leader_epoch=self._epoch(w.tp),
                    fetch_offset=w.offset,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=w.max_bytes,
                )
            )
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=self.settings.max_wait_ms,
            min_bytes=1,
            max_bytes=self.settings.max_bytes,
            isolation_level=1 if self.settings.read_committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=[topic_type(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[],
            rack_id=self.settings.rack_id,
            min_version=FETCH_MIN_VERSION,
            max_version=FETCH_MAX_VERSION,
        )

    def _answers(
        self, parts: Sequence[FetchWanted], response: Any
    ) -> dict[TopicPartitionId, FetchAnswer]:
        answers: dict[TopicPartitionId, FetchAnswer] = {}
        top_error = kafka_errors.for_code(int(getattr(response, "error_code", 0) or 0))
        for topic in response.responses:
            for data in topic.partitions:
                tp = TopicPartitionId(topic.topic, int(data.partition_index))
                answers[tp] = self._answer(tp, data, top_error)
        for w in parts:  # a partition the broker left out of its answer: ask again
            answers.setdefault(
                w.tp,
                FetchAnswer(
                    w.tp, error=kafka_errors.UnknownTopicOrPartitionError(str(w.tp)), retriable=True
                ),
            )
        return answers

    def _answer(self, tp: TopicPartitionId, data: Any, top_error: type) -> FetchAnswer:
        """One partition's answer (:func:`~unaligned.kafka.fetch.fetch_answers.read_answer`);
        notes a preferred read replica the leader names, and forgets the partition's replica
        after any error (the next fetch goes to the leader)."""
        target = self._targets.get(tp)
        from_replica = target is not None and target.replica
        answer, replica = read_answer(tp, data, top_error, self._epoch(tp), from_replica)
        if answer.error is not None:
            self._replicas.pop(tp, None)
            if answer.retriable or isinstance(answer.error, kafka_errors.OffsetOutOfRangeError):
                self._stale_topics.add(tp.topic)
        elif replica >= 0 and (target is None or replica != target.node):
            self._replicas[tp] = (replica, time.monotonic() + self.settings.replica_ttl_s)
        return answer

    async def _refresh_metadata(self, topics: Sequence[str]) -> None:
        """Ask for ``topics``' leaders again; a failure leaves the old view (the next round
        retries)."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        try:
            response = await self.manager.send(
                request, request_timeout_ms=self.settings.request_timeout_ms
            )
        except kafka_errors.KafkaError:
            return
        self.manager.cluster.update_metadata(response)
        self._stale_topics.difference_update(topics)
