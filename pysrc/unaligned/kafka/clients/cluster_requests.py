"""The metadata and offset questions of the source, as coroutines on a connection manager.

Each function sends one round of requests on a started admin client's connection manager
(:func:`unaligned.kafka.clients.client_internals.connection_manager`) and says, per partition,
what came back and what is worth asking again; the caller owns the retry loop and its bound
(:mod:`unaligned.kafka.clients.offset_lookup` on the driver, the read tasks on executors).

- :func:`topic_metadata`: ``Metadata`` for named topics (or all), which also refreshes the
  manager's view of leaders and leader epochs; its answer keeps each topic's id (KIP-516).
- :func:`list_offsets`: ``ListOffsets`` (earliest, latest, or by timestamp), one request per
  leader for all its partitions, each with the leader epoch the client knows (KIP-320), so a
  broker that is no longer the leader answers ``FENCED_LEADER_EPOCH`` instead of an old offset.
- :func:`epoch_end_offsets`: ``OffsetsForLeaderEpoch``: where the leader's log ends for an
  epoch, to find a log truncated under a reader after a leader change (KIP-320).

Per-partition answers that Kafka's Java clients ask again for (``NOT_LEADER_OR_FOLLOWER``,
``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH``, ``LEADER_NOT_AVAILABLE``,
``OFFSET_NOT_AVAILABLE``, ``KAFKA_STORAGE_ERROR``, ``REPLICA_NOT_AVAILABLE``,
``UNKNOWN_TOPIC_OR_PARTITION``) and a request that failed whole (connection refused or lost,
timed out, a leader the metadata no longer lists) come back as errors of those partitions,
never raised; any other error is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.structs import TopicPartition as KafkaTopicPartition

from unaligned.kafka.clients.retries import is_retriable
from unaligned.kafka.partitions import TopicPartitionId

#: ``ListOffsets`` timestamps that mean the log start and the log end (or last stable offset).
EARLIEST, LATEST = -2, -1
#: ``ListOffsets`` from v4 carries the current leader epoch.
_LIST_OFFSETS_MIN_VERSION = 4


@dataclass(frozen=True)
class TopicAnswer:
    """One topic of a ``Metadata`` answer: its error class, partitions and topic id."""

    error: type[BaseException]
    partitions: tuple[int, ...]
    topic_id: str | None


@dataclass(frozen=True)
class OffsetRound:
    """One round's answers: ``found`` offsets (``None``: no record at or after that timestamp),
    ``retry`` partitions with the error to ask again after (their topics' metadata refreshed)."""

    found: dict[TopicPartitionId, int | None]
    retry: dict[TopicPartitionId, BaseException]


async def topic_metadata(
    manager: Any, topics: Collection[str] | None, timeout_ms: int
) -> dict[str, TopicAnswer]:
    """``Metadata`` for ``topics`` (``None``: every topic), never creating one; the manager's
    cluster view (leaders, epochs) is updated from it. Internal topics are left out."""
    request = MetadataRequest(
        topics=(
            MetadataRequest.ALL_TOPICS
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(topics)]
        ),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    response = await manager.send(request, request_timeout_ms=timeout_ms)
    manager.cluster.update_metadata(response)
    answers = {}
    for topic in response.topics:
        if topic.is_internal:
            continue
        topic_id = getattr(topic, "topic_id", None)
        answers[topic.name] = TopicAnswer(
            kafka_errors.for_code(topic.error_code),
            tuple(sorted(int(p.partition_index) for p in topic.partitions)),
            None if topic_id is None or int(topic_id) == 0 else str(topic_id),
        )
    return answers


def leader_and_epoch(manager: Any, tp: TopicPartitionId) -> tuple[int | None, int]:
    """The leader node id the manager knows for ``tp`` (``None``: unknown or none) and its
    leader epoch (-1: unknown)."""
    kafka_tp = KafkaTopicPartition(tp.topic, tp.partition)
    leader = manager.cluster.leader_for_partition(kafka_tp)
    if leader is None or leader == -1:
        return None, -1
    epoch = manager.cluster.leader_epoch_for_partition(kafka_tp)
    return int(leader), -1 if epoch is None else int(epoch)


def _by_leader(
    manager: Any, wanted: Collection[TopicPartitionId]
) -> tuple[dict[int, dict[TopicPartitionId, int]], dict[TopicPartitionId, BaseException]]:
    """``wanted`` by leader (with each partition's leader epoch); those without a known leader
    are answered ``LEADER_NOT_AVAILABLE``."""
    by_node: dict[int, dict[TopicPartitionId, int]] = {}
    leaderless: dict[TopicPartitionId, BaseException] = {}
    for tp in wanted:
        leader, epoch = leader_and_epoch(manager, tp)
        if leader is None:
            leaderless[tp] = kafka_errors.LeaderNotAvailableError(str(tp))
        else:
            by_node.setdefault(leader, {})[tp] = epoch
    return by_node, leaderless


async def _send_each(manager: Any, requests: Mapping[int, Any], timeout_ms: int) -> dict[int, Any]:
    """Each node's request sent at once; its answer, or the retriable error that stopped it."""
    pending = {}
    answers: dict[int, Any] = {}
    for node, request in requests.items():
        try:
            pending[node] = manager.send(request, node_id=node, request_timeout_ms=timeout_ms)
        except kafka_errors.KafkaError as exc:  # a leader the metadata no longer lists
            if not is_retriable(exc):
                raise
            answers[node] = exc
    for node, future in pending.items():
        try:
            answers[node] = await future
        except kafka_errors.KafkaError as exc:
            if not is_retriable(exc):
                raise
            answers[node] = exc
    return answers


V = TypeVar("V")


async def _gather(
    manager: Any,
    by_node: Mapping[int, Collection[TopicPartitionId]],
    requests: Mapping[int, Any],
    timeout_ms: int,
    read: Callable[[Any, Any], tuple[TopicPartitionId, int, V]],
) -> tuple[dict[TopicPartitionId, V], dict[TopicPartitionId, BaseException]]:
    """Send each node's request and read every partition of the answers with ``read(topic,
    partition) -> (tp, error code, value)``: the values, and the partitions to ask again (a
    retriable error, a request that failed whole, a partition the answer left out)."""
    found: dict[TopicPartitionId, V] = {}
    retry: dict[TopicPartitionId, BaseException] = {}
    for node, answer in (await _send_each(manager, requests, timeout_ms)).items():
        if isinstance(answer, BaseException):
            retry.update({tp: answer for tp in by_node[node]})
            continue
        for topic in answer.topics:
            for p in topic.partitions:
                tp, error_code, value = read(topic, p)
                error = _partition_error(error_code, tp)
                if error is not None:
                    retry[tp] = error
                else:
                    found[tp] = value
        for tp in by_node[node]:
            if tp not in found and tp not in retry:
                retry[tp] = kafka_errors.UnknownTopicOrPartitionError(f"{tp}: not answered")
    return found, retry


def _partition_error(error_code: int, tp: TopicPartitionId) -> BaseException | None:
    error_type = kafka_errors.for_code(int(error_code))
    if error_type is kafka_errors.NoError:
        return None
    error: BaseException = error_type(str(tp))
    if is_retriable(error_type) or error_type is kafka_errors.UnknownLeaderEpochError:
        return error
    raise error


async def list_offsets(
    manager: Any,
    timestamps: Mapping[TopicPartitionId, int],
    read_committed: bool,
    timeout_ms: int,
) -> OffsetRound:
    """One ``ListOffsets`` round: for each partition the first offset whose timestamp is at or
    after the given one, or :data:`EARLIEST` / :data:`LATEST` (the last stable offset with
    ``read_committed``). One request per leader, sent at once."""
    by_node, retry = _by_leader(manager, timestamps)
    item = ListOffsetsRequest.ListOffsetsTopic
    requests = {}
    for node, epochs in by_node.items():
        topics: dict[str, list[Any]] = {}
        for tp, epoch in epochs.items():
            topics.setdefault(tp.topic, []).append(
                item.ListOffsetsPartition(
                    partition_index=tp.partition,
                    current_leader_epoch=epoch,
                    timestamp=timestamps[tp],
                )
            )
        requests[node] = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=[item(name=t, partitions=ps) for t, ps in topics.items()],
            min_version=_LIST_OFFSETS_MIN_VERSION,
        )

    def offset(topic: Any, p: Any) -> tuple[TopicPartitionId, int, int | None]:
        tp = TopicPartitionId(topic.name, int(p.partition_index))
        return tp, int(p.error_code), None if int(p.offset) < 0 else int(p.offset)

    found, more = await _gather(manager, by_node, requests, timeout_ms, offset)
    retry.update(more)
    return OffsetRound(found, retry)


@dataclass(frozen=True)
class EpochEnd:
    """Where the leader's log ends for a requested epoch: the largest epoch at or below it that
    the leader has, and the offset after that epoch's last record (exclusive end)."""

    leader_epoch: int
    end_offset: int


async def epoch_end_offsets(
    manager: Any, epochs: Mapping[TopicPartitionId, int], timeout_ms: int
) -> tuple[dict[TopicPartitionId, EpochEnd], dict[TopicPartitionId, BaseException]]:
    """One ``OffsetsForLeaderEpoch`` round for the last epoch each partition was read at, to
    the leaders with their current epochs: ``(answers, partitions to ask again)``."""
    by_node, retry = _by_leader(manager, epochs)
    item = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    requests = {}
    for node, current in by_node.items():
        topics: dict[str, list[Any]] = {}
        for tp, epoch in current.items():
            topics.setdefault(tp.topic, []).append(
                item.OffsetForLeaderPartition(
                    partition=tp.partition, current_leader_epoch=epoch, leader_epoch=epochs[tp]
                )
            )
        requests[node] = OffsetForLeaderEpochRequest(
            replica_id=-1, topics=[item(topic=t, partitions=ps) for t, ps in topics.items()]
        )

    def epoch_end(topic: Any, p: Any) -> tuple[TopicPartitionId, int, EpochEnd]:
        tp = TopicPartitionId(topic.topic, int(p.partition))
        return tp, int(p.error_code), EpochEnd(int(p.leader_epoch), int(p.end_offset))

    answers, more = await _gather(manager, by_node, requests, timeout_ms, epoch_end)
    retry.update(more)
    return answers, retry


def topics_of(partitions: Collection[TopicPartitionId]) -> Sequence[str]:
    return sorted({tp.topic for tp in partitions})
