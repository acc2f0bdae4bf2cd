"""The requests of one produce session, run on a kept admin client's I/O thread.

:class:`Requests` is the I/O half of
:class:`unaligned.kafka.produce.produce_session.ProduceSession`: it queues and sends the ``Produce``
requests, and has :class:`~unaligned.kafka.transactions.coordinator_requests.CoordinatorRequests`
ask ``InitProducerId``, ``Metadata`` and ``AddPartitionsToTxn``, as the session's
:class:`~unaligned.kafka.produce.producer_modes.ProducerMode` says (a transaction, or an
idempotent producer without one). The task thread calls the public
methods; everything that touches a connection runs on the I/O thread of the connection manager
(:mod:`unaligned.kafka.clients.client_internals`). What an answer means is
:mod:`unaligned.kafka.produce.produce_answers`. Sending rules (Kafka's idempotent producer, at
most :data:`MAX_IN_FLIGHT` per partition):

- a partition's batches go out in sequence order, only after the mode joined it
  (``AddPartitionsToTxn`` in a transaction);
- a retriable answer holds the partition: once nothing of it is in flight, every unacknowledged
  batch is sent again in order with the same sequence, after a doubling back-off;
  ``OUT_OF_ORDER_SEQUENCE_NUMBER`` behind such a failure is retriable, ``DUPLICATE_SEQUENCE_
  NUMBER`` is an acknowledgement;
- ``MESSAGE_TOO_LARGE`` / ``RECORD_LIST_TOO_LARGE``: the batch is split in two sent in its place
  from the same base sequence (:mod:`unaligned.kafka.produce.produce_queue`), its topic noted
  (:meth:`Requests.take_refused_topics`); a single record refused so fails;
- a lost connection, a broker the metadata no longer lists, ``NOT_LEADER_OR_FOLLOWER``,
  ``NETWORK_EXCEPTION``, ``KAFKA_STORAGE_ERROR``, a timed-out request: the partition's leader
  is looked up again (``Metadata``) before the batches go out again; ``NOT_ENOUGH_REPLICAS``
  (before or after the append) and ``REQUEST_TIMED_OUT`` keep the sequence, so a batch the
  broker wrote after all is answered ``DUPLICATE_SEQUENCE_NUMBER`` and counted once;
  ``UNKNOWN_PRODUCER_ID`` is asked again only while the answer carries no log start offset
  (as Kafka's ``TransactionManager.canRetry`` for a transactional producer);
- anything else, or ``delivery.timeout.ms`` passing, fails the batch and those behind it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.producer import ProduceRequest

from unaligned.kafka.clients.client_internals import event_loop
from unaligned.kafka.clients.producer_options import TWO_PHASE_COMMIT_KWARG
from unaligned.kafka.clients.retries import needs_metadata
from unaligned.kafka.produce.produce_answers import TOO_LARGE, can_retry, final_error, produce_error
from unaligned.kafka.produce.produce_queue import PartitionQueue, QueuedBatch, split_refused
from unaligned.kafka.produce.producer_modes import ProducerMode
from unaligned.kafka.transactions.coordinator_requests import (
    FIRST_BACKOFF_S,
    MAX_BACKOFF_S,
    CoordinatorRequests,
)

logger = logging.getLogger(__name__)

#: Produce requests in flight per partition (the broker keeps the last 5 batches per producer).
MAX_IN_FLIGHT = 5
#: Produce requests in flight per broker connection; the session's kept client allows one more
#: (:data:`CONNECTION_IN_FLIGHT`), for the coordinator's and metadata requests.
MAX_IN_FLIGHT_PER_NODE = 5
#: Requests in flight per connection of the kept client that produce sessions borrow. Also what
#: sets that client apart from the process's other kept client (``DescribeTransactions``,
#: topic limits): a broker quota throttles and pauses the connections that produce, and a
#: paused connection must not hold up the questions a task asks before it begins.
CONNECTION_IN_FLIGHT = MAX_IN_FLIGHT_PER_NODE + 1
_PRODUCE_MIN_VERSION, _PRODUCE_MAX_VERSION = 3, 9  # 3: transactional; 9: as kafka-python


class Requests:
    """The session's requests (module docstring). ``manager``: a started admin client's
    connection manager; ``mode``: how the producer writes; ``settings``: ``KafkaProducer``
    settings with defaults filled in."""

    def __init__(self, manager: Any, mode: ProducerMode[Any], settings: Mapping[str, Any]) -> None:
        self._manager = manager
        self._net = event_loop(manager)
        self._mode = mode
        self._request_timeout_ms = int(settings["request_timeout_ms"])
        self._retry_backoff_s = max(int(settings["retry_backoff_ms"]), 1) / 1000
        self._calls = CoordinatorRequests(
            manager,
            mode.transactional_id,
            self._request_timeout_ms,
            int(settings["transaction_timeout_ms"]),
            bool(settings.get(TWO_PHASE_COMMIT_KWARG, False)),
        )
        self._producer_id_and_epoch = (-1, -1)
        # I/O thread only
        self._partitions: dict[tuple[str, int], PartitionQueue] = {}
        self._leader_cache: dict[str, dict[int, int]] = {}
        self._node_in_flight: dict[Any, int] = {}
        self._pumping = False
        self._pump_again = False
        # shared with the task thread
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._incoming: list[QueuedBatch] = []
        self._pump_scheduled = False
        self._stopped = False
        self._outstanding = 0
        self._unacknowledged_bytes = 0
        self._sent = 0
        self._acknowledged = 0
        self._first_failure: BaseException | None = None
        self.may_have_partitions = False
        self._refused_topics: set[str] = set()  # refused a batch as too large

    # --- task thread --------------------------------------------------------------------------

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        return self._producer_id_and_epoch

    def init_producer_id(self, timeout_s: float) -> None:
        """Step 1 of the session, as the mode does it (in a transaction the coordinator bumps
        the id's epoch, fencing older attempts and aborting what they left open); raises the
        refusal or a timeout."""
        deadline = time.monotonic() + timeout_s
        self._producer_id_and_epoch = self._manager.run(
            self._mode.init_producer_id, self._calls, deadline
        )

    def partition_count(self, topic: str, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        leaders: dict[int, int] = self._manager.run(self._known_leaders, topic, deadline)
        return len(leaders)

    def queue(self, batch: QueuedBatch) -> None:
        with self._lock:
            self._incoming.append(batch)
            self._outstanding += 1
            self._sent += batch.record_count
            self._unacknowledged_bytes += batch.payload_bytes

    def pump(self) -> None:
        """Have the I/O thread send what was queued (one hand-over, however many batches)."""
        with self._lock:
            if self._pump_scheduled or not self._incoming:
                return
            self._pump_scheduled = True
        self._manager.call_soon(self._pump)

    def stop(self) -> None:
        """Send nothing more: queued batches fail, answers in flight are still counted."""
        with self._lock:
            self._stopped = True
        self._manager.call_soon(self._fail_queued, kafka_errors.KafkaError("the session stopped"))

    def wait_settled(self, timeout_s: float, at_most_bytes: int | None = None) -> bool:
        """Wait until every queued batch is acknowledged or failed, or, given ``at_most_bytes``,
        until at most that many payload bytes are unacknowledged; ``False`` on timeout."""

        def settled() -> bool:
            if self._outstanding == 0:
                return True
            return at_most_bytes is not None and self._unacknowledged_bytes <= at_most_bytes

        with self._settled:
            return self._settled.wait_for(settled, timeout_s)

    def unacknowledged_bytes(self) -> int:
        with self._lock:
            return self._unacknowledged_bytes

    def record_counts(self) -> tuple[int, int]:
        """``(records queued, records acknowledged)``."""
        with self._lock:
            return self._sent, self._acknowledged

    def take_refused_topics(self) -> set[str]:
        """Topics that refused a batch as too large since the last call."""
        with self._lock:
            refused, self._refused_topics = self._refused_topics, set()
        return refused

    def first_failure(self) -> BaseException | None:
        with self._lock:
            return self._first_failure

    # --- I/O thread: sending ------------------------------------------------------------------

    async def _known_leaders(self, topic: str, deadline: float) -> dict[int, int]:
        """The leaders of ``topic``'s partitions, asked once (again after a leader error)."""
        leaders = self._leader_cache.get(topic)
        if leaders is None:
            leaders = self._leader_cache[topic] = await self._calls.leaders(topic, deadline)
        return leaders

    async def _pump(self) -> None:
        """Take the queued batches, make their partitions ready (leader known, joined by the
        mode: registered with the transaction) and send what the in-flight bounds allow. One
        pump runs at a time; a pump asked for meanwhile makes the running one go round again."""
        if self._pumping:
            self._pump_again = True
            return
        self._pumping = True
        try:
            again = True
            while again:
                self._pump_again = False
                with self._lock:
                    incoming, self._incoming = self._incoming, []
                    self._pump_scheduled = False
                    stopped = self._stopped
                for batch in incoming:
                    key = (batch.topic, batch.partition)
                    part = self._partitions.get(key) or self._partitions.setdefault(
                        key, PartitionQueue(batch.topic, batch.partition)
                    )
                    part.queued.append(batch)
                if stopped:
                    await self._fail_queued(kafka_errors.KafkaError("the session stopped"))
                    return
                for part in self._partitions.values():
                    if part.failure is not None and part.queued:
                        self._fail_partition(part, part.failure)
                waiting = [p for p in self._partitions.values() if p.queued]
                try:
                    await self._make_ready(waiting)
                except Exception as exc:  # refused by the coordinator, out of time...
                    for part in waiting:
                        if not part.added or part.leader is None:
                            self._fail_partition(part, exc)
                for part in self._partitions.values():
                    self._send_ready(part)
                again = self._pump_again
        finally:
            self._pumping = False

    async def _make_ready(self, parts: list[PartitionQueue]) -> None:
        """Look up unknown leaders and join new partitions, retrying until the first
        waiting batch's ``delivery.timeout.ms`` passes."""
        if not parts:
            return
        deadline = min(part.queued[0].deadline for part in parts)
        for topic in sorted({p.topic for p in parts if p.leader is None}):
            leaders = await self._known_leaders(topic, deadline)
            for part in parts:
                if part.topic == topic:
                    part.leader = leaders.get(part.partition)
                    if part.leader is None:
                        self._fail_partition(
                            part,
                            kafka_errors.UnknownTopicOrPartitionError(
                                f"topic {topic!r} has no partition {part.partition}"
                            ),
                        )
        new = [p for p in parts if not p.added and p.failure is None]
        if new:
            self.may_have_partitions = True
            by_topic: dict[str, list[int]] = {}
            for part in new:
                by_topic.setdefault(part.topic, []).append(part.partition)
            await self._mode.join(self._calls, self._producer_id_and_epoch, by_topic, deadline)
            for part in new:
                part.added = True

    def _send_ready(self, part: PartitionQueue) -> None:
        """3. Produce: the partition's next queued batches, while the in-flight bounds allow."""
        while (
            part.queued
            and part.failure is None
            and part.added
            and part.leader is not None
            and not part.to_retry
            and len(part.in_flight) < MAX_IN_FLIGHT
            and self._node_in_flight.get(part.leader, 0) < MAX_IN_FLIGHT_PER_NODE
        ):
            batch = part.queued.popleft()
            part.in_flight.append(batch)
            leader = part.leader
            self._node_in_flight[leader] = self._node_in_flight.get(leader, 0) + 1
            topic_data = ProduceRequest.TopicProduceData
            request = ProduceRequest(
                transactional_id=self._mode.transactional_id,
                acks=-1,
                timeout_ms=self._request_timeout_ms,
                topic_data=[
                    topic_data(
                        name=part.topic,
                        partition_data=[
                            topic_data.PartitionProduceData(
                                index=part.partition, records=batch.data
                            )
                        ],
                    )
                ],
                min_version=_PRODUCE_MIN_VERSION,
                max_version=_PRODUCE_MAX_VERSION,
            )
            try:
                answer = self._manager.send(
                    request, node_id=leader, request_timeout_ms=self._request_timeout_ms
                )
            except Exception as exc:  # no connection to the leader could be made
                self._on_answer(part, batch, leader, exc)
            else:
                answer.add_both(self._on_answer, part, batch, leader)

    def _on_answer(
        self, part: PartitionQueue, batch: QueuedBatch, leader: Any, result: Any
    ) -> None:
        part.in_flight.remove(batch)
        self._node_in_flight[leader] -= 1
        error = produce_error(result, part)
        with self._lock:
            stopped = self._stopped
        if error is None:
            self._settle(batch, None)
            part.backoff_s = FIRST_BACKOFF_S
        elif isinstance(error, TOO_LARGE) and batch.record_count > 1 and not stopped:
            # 3a. Refused as too large: the sequence did not advance; its two halves are sent
            # in its place from the same base sequence (those behind it are answered
            # OUT_OF_ORDER_SEQUENCE_NUMBER and sent again after them).
            part.to_retry.extend(split_refused(batch))
            logger.info(
                "%s-%d refused a batch of %d record(s) (%d bytes) as too large (%r): sending it "
                "again as two",
                batch.topic,
                batch.partition,
                batch.record_count,
                len(batch.data),
                error,
            )
            with self._lock:
                self._outstanding += 1
                self._refused_topics.add(batch.topic)
        elif not stopped and can_retry(error, part) and time.monotonic() < batch.deadline:
            part.to_retry.append(batch)
            if needs_metadata(error):  # leader moved, broker lost or gone from the metadata
                part.leader = None
                self._leader_cache.pop(part.topic, None)
        else:
            if not stopped:  # once stopped, the error as it came
                if isinstance(error, TOO_LARGE):
                    with self._lock:
                        self._refused_topics.add(batch.topic)
                error = final_error(error, batch, self._mode.describe())
            self._settle(batch, error)
            self._fail_partition(part, error)
        if part.to_retry and not part.in_flight:
            # Everything of the partition is answered: send the failed ones again, in order.
            for again in sorted(part.to_retry, key=lambda b: b.base_sequence, reverse=True):
                part.queued.appendleft(again)
            part.to_retry.clear()
            self._net.call_later(part.backoff_s, self._pump)
            part.backoff_s = min(max(part.backoff_s * 2, self._retry_backoff_s), MAX_BACKOFF_S)
        elif any(p.queued for p in self._partitions.values()):
            # a slot is free on the connection: any partition may go on, not only this one
            self._net.call_soon(self._pump)

    def _fail_partition(self, part: PartitionQueue, error: BaseException) -> None:
        """Fail every batch of ``part`` not in flight: none can be written in sequence now."""
        if part.failure is None:
            part.failure = error
        waiting = [*part.to_retry, *part.queued]
        part.to_retry.clear()
        part.queued.clear()
        for batch in waiting:
            self._settle(batch, error)

    async def _fail_queued(self, error: BaseException) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
        for batch in incoming:
            self._settle(batch, error)
        for part in self._partitions.values():
            waiting = [*part.queued] + ([] if part.in_flight else [*part.to_retry])
            part.queued.clear()
            if not part.in_flight:
                part.to_retry.clear()
            for batch in waiting:
                self._settle(batch, error)

    def _settle(self, batch: QueuedBatch, error: BaseException | None) -> None:
        with self._settled:
            self._outstanding -= 1
            self._unacknowledged_bytes -= batch.payload_bytes
            if error is None:
                self._acknowledged += batch.record_count
            elif self._first_failure is None:
                self._first_failure = error
            self._settled.notify_all()
