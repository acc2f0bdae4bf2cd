"""A sink task's records written as encoded record batches on the process's kept connections.

:class:`ProduceSession` does what Kafka's idempotent producer does (in a transaction, or without
one: its :class:`~unaligned.kafka.produce.producer_modes.ProducerMode`), for batches encoded ahead
of time (:mod:`unaligned.kafka.records.record_encoder`), over the connections of the
worker process's kept admin client (lent from :meth:`~ProduceSession.begin` to
:meth:`~ProduceSession.close`; :mod:`unaligned.kafka.clients.admin_clients`): no ``KafkaProducer``,
no sender thread. The requests run on that client's I/O thread (:mod:`.produce_requests`); the task
thread only encodes and waits. The protocol, numbered where it runs:

1. :meth:`~ProduceSession.begin`: ``InitProducerId`` (in a transaction an older attempt on the
   id is fenced).
2. :meth:`~ProduceSession.send_batch`: producer id, epoch and the partition's next sequence
   stamped, batch queued; in a transaction ``AddPartitionsToTxn`` before a partition's first
   batch.
3. ``Produce`` (``acks=all``, in sequence order, retried with the same sequences; a batch
   refused as too large split, :meth:`~ProduceSession.take_refused_topics`).
4. :meth:`~ProduceSession.prepare`: every record acknowledged; a transaction stays open for
   the driver (:func:`unaligned.kafka.transactions.transaction_coordinator.commit_prepared`),
   an idempotent session's records are visible already.

A non-retriable failure poisons the session (:meth:`prepare` refuses); a refused permission is
raised as :class:`~unaligned.errors.KafkaAuthorizationError` naming the ACL to add.
ARCHITECTURE.md ("The two-phase commit") has the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import kafka.errors as kafka_errors

from kafka import KafkaProducer
from unaligned.errors import OptionError, TransactionWriteError
from unaligned.kafka.clients.admin_clients import shared_admin_client, warm_admin_client
from unaligned.kafka.clients.authorization import explain
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.clients.connections import describe_servers
from unaligned.kafka.clients.producer_options import TWO_PHASE_COMMIT_KWARG
from unaligned.kafka.produce.produce_queue import QueuedBatch, RecordOrigin
from unaligned.kafka.produce.produce_requests import CONNECTION_IN_FLIGHT, Requests
from unaligned.kafka.produce.producer_modes import ProducerMode
from unaligned.kafka.records.record_batch_layout import (
    ProducerState,
    has_producer_state,
    increment_sequence,
    with_producer_state,
)
from unaligned.kafka.transactions.transactions import WriterState

#: How long past ``delivery.timeout.ms`` :meth:`ProduceSession.flush` waits for the last answer.
_FLUSH_SLACK_S = 5.0
W = TypeVar("W")


def warm_up(client_kwargs: Mapping[str, Any]) -> None:
    """Build the kept client :meth:`ProduceSession.begin` lends for these ``client_kwargs``
    (:func:`unaligned.kafka.clients.admin_clients.warm_admin_client`); no request of a session."""
    warm_admin_client(client_kwargs, max_in_flight=CONNECTION_IN_FLIGHT)


class ProduceSession(Generic[W]):
    """One sink task attempt's writes (the module docstring has the protocol).

    :meth:`begin` -> :meth:`send_batch`... -> :meth:`prepare` (a transaction stays open for the
    driver) or :meth:`abort`; then :meth:`close`, which never ends a transaction.
    ``client_kwargs`` are the sink's ``KafkaProducer`` kwargs; ``mode``: in a transaction or
    idempotent only (``W``: what :meth:`prepare` returns). The constructor touches no network.
    """

    def __init__(self, client_kwargs: Mapping[str, Any], mode: ProducerMode[W]) -> None:
        if mode.transactional_id == "":
            raise OptionError("a ProduceSession needs a non-empty transactional id")
        self._kwargs = dict(client_kwargs)
        self._mode = mode
        self._settings = {**KafkaProducer.DEFAULT_CONFIG, **self._kwargs}
        self._lent: contextlib.ExitStack | None = None
        self._requests: Requests | None = None
        self._sequences: dict[tuple[str, int], int] = {}
        self._partition_counts: dict[str, int] = {}
        self._state = WriterState.NEW

    @property
    def transactional_id(self) -> str | None:
        return self._mode.transactional_id

    def describe(self) -> str:
        """The session in messages: ``transaction 'id'`` or ``the idempotent producer``."""
        return self._mode.describe()

    def begin(self) -> None:
        """1. Lend the kept client and run ``InitProducerId`` (bounded by ``max_block_ms``)."""
        self._require((WriterState.NEW,), "begin")
        lent = contextlib.ExitStack()
        admin = lent.enter_context(
            shared_admin_client(self._kwargs, max_in_flight=CONNECTION_IN_FLIGHT)
        )
        requests = Requests(connection_manager(admin), self._mode, self._settings)
        try:
            requests.init_producer_id(self._settings["max_block_ms"] / 1000)
        except kafka_errors.KafkaError as exc:
            failure: Exception = explain(exc, self._kwargs) or TransactionWriteError(
                f"could not open {self.describe()} on {describe_servers(self._kwargs)}: {exc!r}"
            )
            lent.__exit__(type(failure), failure, None)  # drops the kept client
            raise failure from exc
        self._lent, self._requests = lent, requests
        self._state = WriterState.OPEN

    def batch_settings(self) -> tuple[str, int, int]:
        """``(compression.type, batch.size, max.request.size)``, to encode by."""
        settings = self._settings
        return (
            settings["compression_type"] or "none",
            int(settings["batch_size"]),
            int(settings["max_request_size"]),
        )

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has; :class:`TransactionWriteError` if it is unknown."""
        requests = self._open_requests("look up partitions for")
        if topic in self._partition_counts:
            return self._partition_counts[topic]
        try:
            count = requests.partition_count(topic, self._settings["max_block_ms"] / 1000)
        except kafka_errors.KafkaError as exc:
            raise explain(exc, self._kwargs) or TransactionWriteError(
                f"could not find the partitions of topic {topic!r} for {self.describe()}: {exc!r}"
            ) from exc
        self._partition_counts[topic] = count
        return count

    def send_batch(
        self,
        topic: str,
        partition: int,
        data: bytes,
        record_count: int,
        payload_bytes: int,
        *,
        wake_sender: bool = True,
        origin: RecordOrigin | None = None,
        first_record: int = 0,
    ) -> None:
        """2. Queue one encoded v2 batch of ``record_count`` records; returns before the broker
        acknowledges it. ``payload_bytes``: its key, value and header bytes (what
        :meth:`unacknowledged_bytes` counts). ``wake_sender=False`` leaves sending to the next
        :meth:`wake_sender` (one hand-over to the I/O thread per chunk). ``origin`` and
        ``first_record``: where its records came from, for a refusal's message."""
        requests = self._open_requests("send")
        state = self.producer_state(topic, partition)
        self._sequences[(topic, partition)] = increment_sequence(state.base_sequence, record_count)
        stamped = data if has_producer_state(data, state) else with_producer_state(data, state)
        deadline = time.monotonic() + self._settings["delivery_timeout_ms"] / 1000
        requests.queue(
            QueuedBatch(
                topic,
                partition,
                stamped,
                record_count,
                payload_bytes,
                state.base_sequence,
                deadline,
                origin,
                first_record,
            )
        )
        if wake_sender:
            requests.pump()

    def producer_state(self, topic: str, partition: int) -> ProducerState:
        """The producer fields the next batch for ``partition`` of ``topic`` gets: encoded with
        them (base sequence = records sent to the partition so far), a batch is sent as it
        is; any other batch is rewritten by :meth:`send_batch`."""
        producer_id, epoch = self._open_requests("encode for").producer_id_and_epoch
        sequence = self._sequences.get((topic, partition), 0)
        return ProducerState(
            producer_id, epoch, sequence, transactional=self._mode.transactional_batches
        )

    def wake_sender(self) -> None:
        """Hand what :meth:`send_batch` queued to the I/O thread."""
        if self._requests is not None:
            self._requests.pump()

    def take_refused_topics(self) -> set[str]:
        """Topics that refused a batch as too large since the last call: their
        ``max.message.bytes`` changed (:mod:`unaligned.kafka.produce.topic_limits` asks again)."""
        return set() if self._requests is None else self._requests.take_refused_topics()

    def unacknowledged_bytes(self) -> int:
        """Payload bytes sent and not yet acknowledged (a failed batch no longer counts)."""
        return 0 if self._requests is None else self._requests.unacknowledged_bytes()

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every batch sent so far is acknowledged or failed.

        Raises :class:`TransactionWriteError` if ``timeout_s`` (default: ``delivery.timeout.ms``
        and a little) passes first or a batch failed."""
        self._wait_for_acknowledgements("flush", None, timeout_s)

    def wait_unacknowledged(self, at_most_bytes: int, timeout_s: float | None = None) -> None:
        """Block until at most ``at_most_bytes`` payload bytes are sent and unacknowledged (the
        bound of a producer's buffer: the batches sent last stay in flight while the next chunk
        is encoded, where :meth:`flush` would drain them all). Raises as :meth:`flush`."""
        self._wait_for_acknowledgements("wait for acknowledgements", at_most_bytes, timeout_s)

    def _wait_for_acknowledgements(
        self, action: str, at_most_bytes: int | None, timeout_s: float | None
    ) -> None:
        """:meth:`flush` (``at_most_bytes`` ``None``: everything) and
        :meth:`wait_unacknowledged`."""
        requests = self._open_requests(action)
        if timeout_s is None:
            timeout_s = self._settings["delivery_timeout_ms"] / 1000 + _FLUSH_SLACK_S
        requests.pump()
        if not requests.wait_settled(timeout_s, at_most_bytes):
            raise TransactionWriteError(
                f"records of {self.describe()} were not acknowledged within {timeout_s} s "
                f"({requests.unacknowledged_bytes()} bytes outstanding)"
            )
        failure = requests.first_failure()
        if isinstance(failure, TransactionWriteError):  # worded already (a record too large)
            raise TransactionWriteError(str(failure)) from failure
        refused = None if failure is None else explain(failure, self._kwargs)
        if refused is not None:
            raise refused from failure
        if failure is not None:
            sent, acknowledged = requests.record_counts()
            raise TransactionWriteError(
                f"{sent - acknowledged} record(s) of {self.describe()} were not written: "
                f"{failure!r}"
            ) from failure

    def prepare(self) -> W:
        """4. Pre-commit: every record acknowledged; a transaction stays open.

        In a transaction batches go out only after ``AddPartitionsToTxn`` registered their
        partition, so the coordinator knows every partition written; the broker aborts the
        transaction by itself once it is older than ``transaction_timeout_ms`` (unless it takes
        part in two-phase commit). Returns what the mode makes of the records
        (:meth:`~unaligned.kafka.produce.producer_modes.ProducerMode.written`).
        """
        self.flush()
        requests = self._open_requests("prepare")
        sent, acknowledged = requests.record_counts()
        if acknowledged != sent:
            raise TransactionWriteError(
                f"{self.describe()}: {sent - acknowledged} of {sent} record(s) not acknowledged "
                "after flush"
            )
        self._state = WriterState.PREPARED
        return self._mode.written(
            requests.producer_id_and_epoch,
            acknowledged,
            bool(self._settings.get(TWO_PHASE_COMMIT_KWARG, False)),
        )

    def abort(self) -> None:
        """Give up the session (open or prepared): wait for the requests in flight, then have
        the mode end what it leaves if any partition may have joined it (a transaction:
        ``EndTxn(abort)``, :func:`~unaligned.kafka.transactions.transaction_coordinator.
        abort_prepared`; an idempotent producer's acknowledged records stay). No-op before
        :meth:`begin`."""
        if self._state in (WriterState.NEW, WriterState.ABORTED):
            return
        requests = self._open_requests("abort", (WriterState.OPEN, WriterState.PREPARED))
        requests.stop()
        requests.wait_settled(self._settings["request_timeout_ms"] / 1000 + _FLUSH_SLACK_S)
        self._state = WriterState.ABORTED
        if not requests.may_have_partitions:
            return
        sent, _ = requests.record_counts()  # >= 1: partitions join with a batch queued
        self._mode.abandon(self._kwargs, requests.producer_id_and_epoch, sent)

    def close(self) -> None:
        """Give the kept client back. Never commits or aborts: a prepared transaction stays
        open. A session whose requests failed drops the kept client (its connections may be
        broken)."""
        requests, self._requests = self._requests, None
        lent, self._lent = self._lent, None
        self._state = WriterState.CLOSED
        if requests is not None:
            requests.stop()
        if lent is None:
            return
        failure = None if requests is None else requests.first_failure()
        if failure is not None:
            lent.__exit__(type(failure), failure, None)
        else:
            lent.close()

    def __enter__(self) -> ProduceSession[W]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_requests(
        self, action: str, states: tuple[WriterState, ...] = (WriterState.OPEN,)
    ) -> Requests:
        self._require(states, action)
        assert self._requests is not None
        return self._requests

    def _require(self, states: tuple[WriterState, ...], action: str) -> None:
        if self._state not in states:
            raise TransactionWriteError(
                f"cannot {action} {self.describe()}: the session is {self._state.value}"
            )
