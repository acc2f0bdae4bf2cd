"""The requests around a producer's ``Produce`` requests, for one transactional id (or none).

:class:`CoordinatorRequests` asks the transaction coordinator (``FindCoordinator``,
``InitProducerId``, ``AddPartitionsToTxn``) and any broker for partition leaders
(``Metadata``), as coroutines on the connection manager's I/O thread
(:mod:`unaligned.kafka.produce.produce_requests`). Each is retried with back-off (5 ms, doubling, at
most 1 s) until a deadline when the coordinator moved, is loading or answers
``CONCURRENT_TRANSACTIONS``, or a connection was lost; any other error is raised as
kafka-python's error type, a refused permission as
:class:`~unaligned.kafka.clients.authorization.RequestRefused` naming the resource and the
operation (``FindCoordinator``: TransactionalId Describe; ``InitProducerId``: Write, with
two-phase commit TwoPhaseCommit; ``AddPartitionsToTxn``: Write on the id or the topic;
``Metadata``: Topic Describe). Versions are capped as kafka-python's producer caps them
(``InitProducerId`` v4, ``AddPartitionsToTxn`` v3: transaction protocol v1). Ending a
transaction is :mod:`unaligned.kafka.transactions.transaction_coordinator`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    InitProducerIdRequest,
)

from unaligned.kafka.clients.authorization import (
    TOPIC,
    TRANSACTIONAL_ID,
    RequestRefused,
    Resource,
)
from unaligned.kafka.clients.client_internals import event_loop
from unaligned.kafka.clients.retries import is_retriable

FIRST_BACKOFF_S = 0.005
MAX_BACKOFF_S = 1.0
INIT_PRODUCER_ID_MAX_VERSION = 4
#: ``InitProducerId`` v6 carries ``enable2Pc`` (KIP-939); asked for exactly, so that a broker
#: without it refuses the request instead of dropping the flag.
INIT_PRODUCER_ID_2PC_VERSION = 6
ADD_PARTITIONS_MAX_VERSION = 3
#: What Java's idempotent producer sends as ``transactionTimeoutMs`` without a transaction.
IDEMPOTENT_TRANSACTION_TIMEOUT_MS = 2**31 - 1
_MOVED = (kafka_errors.NotCoordinatorError, kafka_errors.CoordinatorNotAvailableError)


class CoordinatorRequests:
    """One transactional id's coordinator and metadata requests on ``manager`` (a started admin
    client's connection manager; see the module docstring). ``transactional_id`` ``None``: an
    idempotent producer's, which asks no coordinator."""

    def __init__(
        self,
        manager: Any,
        transactional_id: str | None,
        request_timeout_ms: int,
        transaction_timeout_ms: int,
        two_phase_commit: bool = False,
    ) -> None:
        self._manager = manager
        self._tid = transactional_id
        self._request_timeout_ms = request_timeout_ms
        self._transaction_timeout_ms = transaction_timeout_ms
        self._two_phase_commit = two_phase_commit
        self._coordinator: Any = None

    async def init_producer_id(self, deadline: float) -> tuple[int, int]:
        """``(producer id, epoch)``: the epoch is bumped, an older producer of the id is fenced
        and what it left open is aborted (the coordinator answers once that is done). With
        two-phase commit (KIP-939) the transaction the id opens next is never aborted by the
        broker's transaction timeout: only a commit or abort ends it."""

        def request() -> Any:
            if self._two_phase_commit:
                return InitProducerIdRequest(
                    transactional_id=self._tid,
                    transaction_timeout_ms=self._transaction_timeout_ms,
                    producer_id=-1,
                    producer_epoch=-1,
                    enable2_pc=True,
                    keep_prepared_txn=False,
                    min_version=INIT_PRODUCER_ID_2PC_VERSION,
                    max_version=INIT_PRODUCER_ID_2PC_VERSION,
                )
            return InitProducerIdRequest(
                transactional_id=self._tid,
                transaction_timeout_ms=self._transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
                max_version=INIT_PRODUCER_ID_MAX_VERSION,
            )

        response = await self._ask_coordinator(request, _error_code, deadline, self._init_refusal)
        return int(response.producer_id), int(response.producer_epoch)

    def _init_refusal(self, _response: Any) -> RequestRefused:
        resource = Resource(TRANSACTIONAL_ID, str(self._tid))
        if self._two_phase_commit:  # Write is checked first: KafkaApis, 4.4
            return RequestRefused(
                "InitProducerId with enable2Pc (two-phase commit, KIP-939)",
                resource,
                ["TwoPhaseCommit"],
                "or the brokers have transaction.two.phase.commit.enable=false, or the "
                "principal lacks Write",
            )
        return RequestRefused("InitProducerId", resource, ["Write"])

    async def init_idempotent_producer_id(self, deadline: float) -> tuple[int, int]:
        """``(producer id, epoch)`` of a new idempotent producer, from any broker (no
        transactional id: nothing is fenced, nothing is aborted)."""
        backoff = FIRST_BACKOFF_S
        while True:
            request = InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout_ms=IDEMPOTENT_TRANSACTION_TIMEOUT_MS,
                producer_id=-1,
                producer_epoch=-1,
                max_version=INIT_PRODUCER_ID_MAX_VERSION,
            )
            error: BaseException
            try:
                response = await self._manager.send(
                    request, request_timeout_ms=self._timeout_ms(deadline)
                )
            except kafka_errors.KafkaError as exc:
                if not is_retriable(exc):
                    raise
                error = exc
            else:
                error_type = kafka_errors.for_code(response.error_code)
                if error_type is kafka_errors.NoError:
                    return int(response.producer_id), int(response.producer_epoch)
                if error_type is kafka_errors.ClusterAuthorizationFailedError:
                    raise RequestRefused(
                        "InitProducerId (an idempotent producer)",
                        Resource(TOPIC, "<each topic the sink writes>"),
                        ["Write"],
                        "or IdempotentWrite on the Cluster",
                    )
                if not is_retriable(error_type):
                    raise error_type()
                error = error_type()
            backoff = await self._back_off(error, backoff, deadline)

    async def add_partitions(
        self,
        producer: tuple[int, int],
        partitions: Mapping[str, Sequence[int]],
        deadline: float,
    ) -> None:
        """Register ``partitions`` (per topic) with the transaction of ``producer`` (id, epoch):
        ``Produce`` to a partition must wait for this."""
        producer_id, epoch = producer
        topic_type = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

        def request() -> Any:
            return AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self._tid,
                v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    topic_type(name=t, partitions=sorted(ps)) for t, ps in partitions.items()
                ],
                max_version=ADD_PARTITIONS_MAX_VERSION,
            )

        await self._ask_coordinator(
            request, add_partitions_error_code, deadline, self._add_partitions_refusal
        )

    def _add_partitions_refusal(self, response: Any) -> RequestRefused:
        topic_refused = kafka_errors.TopicAuthorizationFailedError.errno
        for topic in response.results_by_topic_v3_and_below:
            for result in topic.results_by_partition:
                if int(result.partition_error_code) == topic_refused:
                    return RequestRefused(
                        "AddPartitionsToTxn", Resource(TOPIC, topic.name), ["Write"]
                    )
        return RequestRefused(
            "AddPartitionsToTxn", Resource(TRANSACTIONAL_ID, str(self._tid)), ["Write"]
        )

    async def leaders(self, topic: str, deadline: float) -> dict[int, int]:
        """Every partition of ``topic`` and its leader's node id."""
        backoff = FIRST_BACKOFF_S
        while True:
            request = MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            error: BaseException
            try:
                response = await self._manager.send(
                    request, request_timeout_ms=self._timeout_ms(deadline)
                )
            except kafka_errors.KafkaError as exc:
                if not is_retriable(exc):
                    raise
                error = exc
            else:
                self._manager.cluster.update_metadata(response)
                found = next((t for t in response.topics if t.name == topic), None)
                unknown = kafka_errors.UnknownTopicOrPartitionError.errno
                error_type = kafka_errors.for_code(found.error_code if found else unknown)
                if error_type is kafka_errors.NoError:
                    assert found is not None
                    leaders = {int(p.partition_index): int(p.leader_id) for p in found.partitions}
                    if leaders and all(leader >= 0 for leader in leaders.values()):
                        return leaders
                    error = kafka_errors.LeaderNotAvailableError(topic)
                elif error_type is kafka_errors.UnknownTopicOrPartitionError:
                    raise error_type(f"topic {topic!r} does not exist")
                elif error_type is kafka_errors.TopicAuthorizationFailedError:
                    raise RequestRefused(
                        "Metadata", Resource(TOPIC, topic), ["Describe"], "or it does not exist"
                    )
                elif not issubclass(error_type, kafka_errors.RetriableError):
                    raise error_type(topic)
                else:
                    error = error_type(topic)
            backoff = await self._back_off(error, backoff, deadline)

    async def _find_coordinator(self, deadline: float) -> Any:
        request = FindCoordinatorRequest(
            key=self._tid, key_type=CoordinatorType.TRANSACTION.value, coordinator_keys=[self._tid]
        )
        response = await self._manager.send(request, request_timeout_ms=self._timeout_ms(deadline))
        found = response.coordinators[0] if response.coordinators else response
        if found.error_code == kafka_errors.TransactionalIdAuthorizationFailedError.errno:
            raise RequestRefused(
                "FindCoordinator", Resource(TRANSACTIONAL_ID, str(self._tid)), ["Describe"]
            )
        if found.error_code:
            raise kafka_errors.for_code(found.error_code)()
        return self._manager.cluster.add_coordinator(
            found, CoordinatorType.TRANSACTION, self._tid, synthesize_node_id=False
        )

    async def _ask_coordinator(
        self,
        request: Callable[[], Any],
        error_code: Callable[[Any], int],
        deadline: float,
        refusal: Callable[[Any], RequestRefused],
    ) -> Any:
        """Send ``request()`` to the coordinator until it answers without a retriable error;
        an authorization error is raised as ``refusal(answer)``."""
        backoff = FIRST_BACKOFF_S
        if self._coordinator is None:
            self._coordinator = self._manager.cluster.get_coordinator(
                self._tid, CoordinatorType.TRANSACTION
            )
        while True:
            try:
                if self._coordinator is None:
                    self._coordinator = await self._find_coordinator(deadline)
                response = await self._manager.send(
                    request(),
                    node_id=self._coordinator,
                    request_timeout_ms=self._timeout_ms(deadline),
                )
            except kafka_errors.KafkaError as exc:  # transport, or a broker no longer listed
                if not is_retriable(exc):
                    raise
                error: BaseException = exc
                self._coordinator = None
            else:
                error_type = kafka_errors.for_code(error_code(response))
                if error_type is kafka_errors.NoError:
                    return response
                if issubclass(error_type, kafka_errors.AuthorizationError):
                    raise refusal(response)
                if not is_retriable(error_type):
                    raise error_type()
                if error_type in _MOVED:
                    self._coordinator = None
                error = error_type()
            backoff = await self._back_off(error, backoff, deadline)

    async def _back_off(self, error: BaseException, backoff: float, deadline: float) -> float:
        """Sleep ``backoff`` and return the next one, or raise ``error`` if the deadline would
        pass first."""
        if time.monotonic() + backoff >= deadline:
            raise error
        await event_loop(self._manager).sleep(backoff)
        return min(backoff * 2, MAX_BACKOFF_S)

    def _timeout_ms(self, deadline: float) -> int:
        left_ms = int((deadline - time.monotonic()) * 1000)
        return max(1, min(self._request_timeout_ms, left_ms))


def _error_code(response: Any) -> int:
    return int(response.error_code)


def add_partitions_error_code(response: Any) -> int:
    """The first partition error of an ``AddPartitionsToTxn`` answer; ``OPERATION_NOT_ATTEMPTED``
    (the coordinator skipped the partition for another one's error) only if it is the only one."""
    codes = [
        int(result.partition_error_code)
        for topic in response.results_by_topic_v3_and_below
        for result in topic.results_by_partition
        if result.partition_error_code
    ]
    not_attempted = kafka_errors.OperationNotAttemptedError.errno
    return next((c for c in codes if c != not_attempted), codes[0] if codes else 0)
