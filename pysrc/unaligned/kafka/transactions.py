"""A task's Kafka transaction: written on an executor, left open for another process to end.

The Kafka sink writes each task's records into a transaction on the executor
(:class:`TransactionalWriter`), *prepares* it (flushed, still open) and hands the
:class:`PreparedTransaction` to the driver, which commits it later in another OS process
(:func:`unaligned.kafka.transaction_coordinator.commit_prepared`, which also explains how a
transaction is resumed without ``init_transactions`` and the stale-EndTxn hazard).
:meth:`prepare` checks every record was acknowledged, so the coordinator knows every partition
the transaction wrote.

Records go in one by one (``send``): the sink's per-record path, used only where its fast path
(:mod:`unaligned.kafka.produce_session`, whole encoded batches on kept connections) cannot run.

The writer reads the producer's private ``_transaction_manager.producer_id_and_epoch``; it is
pinned by ``tests/kafka/test_transactions.py``.
"""

from __future__ import annotations

import enum
import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors

from kafka import KafkaProducer
from unaligned.errors import (
    OptionError,
    TransactionAbortError,
    TransactionWriteError,
)
from unaligned.kafka.connections import build_producer, describe_servers

PRODUCER_CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PreparedTransaction:
    """A flushed, still open transaction that any process can commit or abort.

    ``record_count`` records were acknowledged in it; with 0 the coordinator never heard of the
    transaction and committing or aborting it is a no-op.
    """

    transactional_id: str
    producer_id: int
    epoch: int
    record_count: int

    def describe(self) -> str:
        return (
            f"transactional id {self.transactional_id!r} "
            f"(producer id {self.producer_id}, epoch {self.epoch})"
        )


class WriterState(enum.Enum):
    """Where a task's transaction writer is (this module's and
    :class:`unaligned.kafka.produce_session.ProduceSession`)."""

    NEW = "new"
    OPEN = "open"
    PREPARED = "prepared"
    ABORTED = "aborted"
    CLOSED = "closed"


class TransactionalWriter:
    """Writes one Kafka transaction on an executor (one writer per sink task attempt).

    :meth:`begin` -> :meth:`send`... -> :meth:`prepare` (stays open for the driver) or
    :meth:`abort`; then :meth:`close`, which never ends the transaction. ``client_kwargs`` are
    ``KafkaProducer`` kwargs; the constructor touches no network. Without a ``client_id`` in
    them the producer's client id is ``producer-<transactional id>`` (Kafka's own default).
    """

    def __init__(self, client_kwargs: Mapping[str, Any], transactional_id: str) -> None:
        if not transactional_id:
            raise OptionError("a TransactionalWriter needs a non-empty transactional id")
        configured = client_kwargs.get("transactional_id")
        if configured is not None and configured != transactional_id:
            raise OptionError(
                f"client option transactional_id={configured!r} contradicts the writer's "
                f"transactional id {transactional_id!r}"
            )
        # client.id defaults to "producer-<transactional.id>", as in Kafka's Java producer: one
        # client per task attempt, so broker quotas and client metrics are per task.
        self._client_kwargs = {
            "client_id": f"producer-{transactional_id}",
            **client_kwargs,
            "transactional_id": transactional_id,
        }
        self._transactional_id = transactional_id
        self._producer: KafkaProducer | None = None
        self._state = WriterState.NEW
        self._producer_id = -1
        self._epoch = -1
        # Updated from the producer's I/O thread by the record futures' callbacks.
        self._lock = threading.Lock()
        self._unacknowledged_bytes = 0
        self._sent = 0
        self._acknowledged = 0
        self._first_failure: BaseException | None = None

    @property
    def transactional_id(self) -> str:
        return self._transactional_id

    @property
    def client_id(self) -> str:
        """The producer's client id: what broker quotas and client metrics are keyed by."""
        return str(self._client_kwargs["client_id"])

    def begin(self) -> None:
        """Open the transaction.

        1. Build the producer (bootstrap bounded by ``bootstrap_timeout_ms``).
        2. ``init_transactions``: bumps the id's epoch, aborting whatever an older producer with
           this id left open, and fencing that producer.
        3. ``begin_transaction`` (local: the coordinator hears of it with the first partition).
        """
        self._require((WriterState.NEW,), "begin")
        producer = build_producer(self._client_kwargs)
        try:
            producer.init_transactions()
            producer.begin_transaction()
        except kafka_errors.KafkaError as exc:
            producer.close(timeout=0)
            raise TransactionWriteError(
                f"could not open a transaction for transactional id {self._transactional_id!r} "
                f"on {describe_servers(self._client_kwargs)}: {exc!r}"
            ) from exc
        self._producer = producer
        self._producer_id, self._epoch = self._current_producer_id_and_epoch()
        self._state = WriterState.OPEN

    def _current_producer_id_and_epoch(self) -> tuple[int, int]:
        assert self._producer is not None
        pid_epoch = self._producer._transaction_manager.producer_id_and_epoch
        return pid_epoch.producer_id, pid_epoch.epoch

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one record; returns before the broker acknowledges it.

        May block up to ``max_block_ms`` for metadata or buffer space. A record the producer
        refuses (too large, unknown topic...) raises :class:`TransactionWriteError` and poisons
        the writer: :meth:`prepare` will refuse.
        """
        self._require((WriterState.OPEN,), "send")
        assert self._producer is not None
        size = _payload_size(key, value, headers)
        with self._lock:
            self._unacknowledged_bytes += size
            self._sent += 1
        try:
            future = self._producer.send(
                topic,
                value=value,
                key=key,
                headers=headers,
                partition=partition,
                timestamp_ms=timestamp_ms,
            )
        except Exception as exc:
            self._on_record_done(size, exc)
            raise TransactionWriteError(
                f"could not send a record to topic {topic!r} in transaction "
                f"{self._transactional_id!r}: {exc!r}"
            ) from exc
        done = functools.partial(self._on_record_done, size)
        future.add_callback(done)
        future.add_errback(done)

    def _on_record_done(self, size: int, result: object) -> None:
        failed = isinstance(result, BaseException)
        self._on_batch_done(size, 1, int(not failed), result if failed else None)  # type: ignore[arg-type]

    def _on_batch_done(
        self, size: int, records: int, acknowledged: int, failure: BaseException | None
    ) -> None:
        with self._lock:
            self._unacknowledged_bytes -= size
            self._acknowledged += acknowledged
            if failure is None and acknowledged != records:
                failure = TransactionWriteError(f"{records - acknowledged} record(s) not written")
            if failure is not None and self._first_failure is None:
                self._first_failure = failure

    def unacknowledged_bytes(self) -> int:
        """Payload bytes (key, value, header keys and values) sent and not yet acknowledged.

        A failed record no longer counts."""
        with self._lock:
            return self._unacknowledged_bytes

    def wait_unacknowledged(self, at_most_bytes: int) -> None:
        """:meth:`flush` when more than ``at_most_bytes`` payload bytes are unacknowledged
        (``KafkaProducer`` has no wait for part of its buffer)."""
        if self.unacknowledged_bytes() > at_most_bytes:
            self.flush()

    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every record sent so far is acknowledged or failed.

        Raises :class:`TransactionWriteError` if ``timeout_s`` passes first or a record failed.
        Without a timeout the wait is bounded by the producer's ``delivery_timeout_ms``.
        """
        self._require((WriterState.OPEN,), "flush")
        assert self._producer is not None
        try:
            self._producer.flush(timeout=timeout_s)
        except kafka_errors.KafkaTimeoutError as exc:
            raise TransactionWriteError(
                f"records of transaction {self._transactional_id!r} were not acknowledged within "
                f"{timeout_s} s ({self.unacknowledged_bytes()} bytes outstanding)"
            ) from exc
        with self._lock:
            failure, failed = self._first_failure, self._sent - self._acknowledged
        if failure is not None:
            raise TransactionWriteError(
                f"{failed} record(s) of transaction {self._transactional_id!r} were not written: "
                f"{failure!r}"
            ) from failure

    def prepare(self) -> PreparedTransaction:
        """Pre-commit: make the transaction committable by any process; it stays open.

        1. Flush: every record is acknowledged by its partition leader (``acks=all``). Batches
           go out only after ``AddPartitionsToTxn`` registered their partition, so the
           coordinator knows every partition written.
        2. Refuse if a record failed or is unacknowledged: a commit would lose it.
        3. Refuse if (producer id, epoch) changed since :meth:`begin` (a bump aborts).
        4. Return the handle. The broker aborts the transaction by itself once it is older
           than ``transaction_timeout_ms``.
        """
        self.flush()  # 1, and 2 for failed records
        with self._lock:
            sent, acknowledged = self._sent, self._acknowledged
        if acknowledged != sent:  # 2
            raise TransactionWriteError(
                f"transaction {self._transactional_id!r}: {sent - acknowledged} of {sent} "
                "record(s) not acknowledged after flush"
            )
        current = self._current_producer_id_and_epoch()
        if current != (self._producer_id, self._epoch):  # 3
            raise TransactionWriteError(
                f"transaction {self._transactional_id!r} was opened as producer id "
                f"{self._producer_id}, epoch {self._epoch}, but the producer is now producer id "
                f"{current[0]}, epoch {current[1]}: the broker aborted it"
            )
        self._state = WriterState.PREPARED
        return PreparedTransaction(  # 4
            self._transactional_id, self._producer_id, self._epoch, acknowledged
        )

    def abort(self) -> None:
        """Abort the transaction from this producer (open or prepared). No-op before begin."""
        if self._state in (WriterState.NEW, WriterState.ABORTED):
            return
        self._require((WriterState.OPEN, WriterState.PREPARED), "abort")
        assert self._producer is not None
        try:
            self._producer.abort_transaction()
        except kafka_errors.KafkaError as exc:
            raise TransactionAbortError(
                f"could not abort transaction {self._transactional_id!r} (producer id "
                f"{self._producer_id}, epoch {self._epoch}): {exc!r}"
            ) from exc
        self._state = WriterState.ABORTED

    def close(self) -> None:
        """Release the producer. Never commits or aborts: a prepared transaction stays open."""
        producer, self._producer = self._producer, None
        self._state = WriterState.CLOSED
        if producer is not None:
            # kafka-python's close flushes and stops the I/O thread; it sends no EndTxn.
            producer.close(timeout=PRODUCER_CLOSE_TIMEOUT_S)

    def __enter__(self) -> TransactionalWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _require(self, states: tuple[WriterState, ...], action: str) -> None:
        if self._state not in states:
            raise TransactionWriteError(
                f"cannot {action} transaction {self._transactional_id!r}: the writer is "
                f"{self._state.value}"
            )


def _payload_size(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None
) -> int:
    size = (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for header_key, header_value in headers or ():
        size += len(header_key) + len(header_value)
    return size
