"""Kafka transactions that outlive the producer that opened them.

The two-phase-commit Kafka sink writes each task's records into a transaction on the executor
(:class:`TransactionalWriter`), *prepares* it (flushes, keeps it open) and hands a
:class:`PreparedTransaction` to the driver, which commits it later in another OS process
(:func:`commit_prepared`). Recovery aborts whatever else a sink's transactional ids have open
(:func:`fence`, :func:`list_transactional_ids`).

How a transaction is resumed in another process
-----------------------------------------------
Kafka's public producer API cannot commit a transaction it did not open: ``init_transactions``
on the same ``transactional.id`` bumps the epoch and *aborts* the open transaction. The
transaction coordinator itself only needs ``EndTxn(transactional_id, producer_id, epoch,
committed)``: the producer that opened the transaction already registered every partition it
wrote to (``AddPartitionsToTxn`` runs before a partition's first batch is sent, and
:meth:`TransactionalWriter.prepare` checks that every record was acknowledged), so nothing else
is needed. :func:`commit_prepared` therefore sends ``FindCoordinator`` and ``EndTxn`` itself
through a ``KafkaAdminClient``'s connection manager. Compared with forcing a fresh
``KafkaProducer``'s transaction manager into ``IN_TRANSACTION`` (what Flink does with the Java
client), this

* relies on fewer private names (the admin client's ``_manager.run`` / ``_manager.send``, and the
  protocol classes) instead of the transaction manager's state machine, lock and flags;
* sees the coordinator's exact error code (kafka-python's ``EndTxnHandler`` folds
  ``INVALID_PRODUCER_ID_MAPPING`` into a generic error and retries ``CONCURRENT_TRANSACTIONS``
  without bound);
* starts no producer sender thread.

EndTxn is sent with ``max_version=3`` (the version kafka-python's own producer uses): transaction
protocol v1, in which the epoch does not change at commit, so a repeated commit of a completed
transaction is answered with success. The private names are pinned by
``tests/test_kafka_transactions.py``; ``integration/test_kafka_transactions.py`` proves the resume
end to end against the real broker.

Coordinator answers (transaction protocol v1) and what they become here:

==============================  ==================================================
commit after CompleteCommit     success (idempotent)
CONCURRENT_TRANSACTIONS         retried with backoff until ``timeout_s``
NOT_COORDINATOR, ..._LOADING    coordinator looked up again, retried
PRODUCER_FENCED (wrong epoch)   :class:`TransactionCommitError`
INVALID_TXN_STATE (aborted)     :class:`TransactionCommitError`
INVALID_PRODUCER_ID_MAPPING     :class:`TransactionCommitError`
==============================  ==================================================

Hazard: with protocol v1 a stale EndTxn carrying the same (producer id, epoch) ends whatever
transaction that producer has open *now*. Never start a new transaction on a transactional id
before the previous one was committed or aborted; an id unique per (query, batch, task) avoids it.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence

import kafka.errors as kafka_errors
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, TransactionState
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from unaligned.errors import (
    KafkaUnavailableError,
    OptionError,
    SinkConfigurationError,
    TransactionAbortError,
    TransactionCommitError,
    TransactionWriteError,
)

logger = logging.getLogger(__name__)

# EndTxn v0-v3 (v4 only adds error codes, v5 is transaction protocol v2 where EndTxn bumps the
# epoch). kafka-python's producer sends the same versions.
END_TXN_MAX_VERSION = 3

DEFAULT_END_TXN_TIMEOUT_S = 60.0
"""How long :func:`commit_prepared` / :func:`abort_prepared` keep retrying retriable answers."""

_FIRST_BACKOFF_S = 0.02
_MAX_BACKOFF_S = 1.0
_CLOSE_TIMEOUT_S = 10.0

OPEN_TRANSACTION_STATES = frozenset(
    {
        TransactionState.ONGOING,
        TransactionState.PREPARE_COMMIT,
        TransactionState.PREPARE_ABORT,
        TransactionState.PREPARE_EPOCH_FENCE,
    }
)
"""States ``ListTransactions`` reports for a transactional id whose transaction is not finished.

``PrepareCommit`` / ``PrepareAbort`` last from the coordinator's decision until its markers are
written (milliseconds); a transaction just committed by :func:`commit_prepared` may briefly be
listed as open."""

# Raised (not answered) retriable errors are transport failures: the broker was not reached
# (KafkaConnectionError, NodeNotReadyError) or did not answer in time (KafkaTimeoutError,
# RequestTimedOutError). They are retried and reported as KafkaUnavailableError at the deadline.
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (kafka_errors.RetriableError,)


@dataclass(frozen=True)
class PreparedTransaction:
    """A flushed, still open transaction that any process can commit or abort.

    ``record_count`` is the number of records the broker acknowledged in it; a transaction with
    no records was never registered with the coordinator and needs no commit.
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


class _WriterState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    PREPARED = "prepared"
    ABORTED = "aborted"
    CLOSED = "closed"


class TransactionalWriter:
    """Writes one Kafka transaction on an executor (one writer per sink task attempt).

    Life cycle: :meth:`begin` -> :meth:`send`... -> :meth:`prepare` (the transaction stays open for
    the driver to commit) or :meth:`abort`; then :meth:`close`, which never ends the transaction.
    The constructor touches no network.
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
        self._client_kwargs = dict(client_kwargs)
        self._client_kwargs["transactional_id"] = transactional_id
        self._transactional_id = transactional_id
        self._producer: Optional[KafkaProducer] = None
        self._state = _WriterState.NEW
        self._producer_id = -1
        self._epoch = -1
        # Updated by the producer's I/O thread through the record futures' callbacks.
        self._lock = threading.Lock()
        self._unacknowledged_bytes = 0
        self._sent = 0
        self._acknowledged = 0
        self._first_failure: Optional[BaseException] = None

    @property
    def transactional_id(self) -> str:
        return self._transactional_id

    def begin(self) -> None:
        """Open the transaction.

        1. Build the producer (bootstrap, bounded by ``bootstrap_timeout_ms``).
        2. ``init_transactions``: bumps this id's epoch, which aborts any transaction an older
           producer with the same id left open, and fences that producer.
        3. ``begin_transaction`` (local only: the coordinator hears of the transaction with the
           first partition added).
        """
        self._require(_WriterState.NEW, "begin")
        self._producer = _build_producer(self._client_kwargs)
        try:
            self._producer.init_transactions()
            self._producer.begin_transaction()
        except kafka_errors.KafkaError as exc:
            self._producer.close(timeout=0)
            self._producer = None
            raise TransactionWriteError(
                f"could not open a transaction for transactional id {self._transactional_id!r} "
                f"on {_servers(self._client_kwargs)}: {exc!r}"
            ) from exc
        pid_epoch = self._producer._transaction_manager.producer_id_and_epoch
        self._producer_id, self._epoch = pid_epoch.producer_id, pid_epoch.epoch
        self._state = _WriterState.OPEN
        logger.debug(
            "opened transaction %r (producer id %d, epoch %d)",
            self._transactional_id,
            self._producer_id,
            self._epoch,
        )

    def send(
        self,
        topic: str,
        value: Optional[bytes],
        key: Optional[bytes] = None,
        headers: Optional[list[tuple[str, bytes]]] = None,
        partition: Optional[int] = None,
        timestamp_ms: Optional[int] = None,
    ) -> None:
        """Queue one record in the transaction; returns before the broker acknowledges it.

        May block up to the producer's ``max_block_ms`` for topic metadata or buffer space. A
        record the producer refuses (too large, unknown topic...) raises
        :class:`TransactionWriteError` and poisons the writer: :meth:`prepare` will refuse.
        """
        self._require(_WriterState.OPEN, "send")
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
        with self._lock:
            self._unacknowledged_bytes -= size
            if isinstance(result, BaseException):
                if self._first_failure is None:
                    self._first_failure = result
            else:
                self._acknowledged += 1

    def unacknowledged_bytes(self) -> int:
        """Payload bytes (key + value + header keys and values) sent but not yet acknowledged.

        A record that failed counts as no longer outstanding."""
        with self._lock:
            return self._unacknowledged_bytes

    def flush(self, timeout_s: Optional[float] = None) -> None:
        """Block until every record sent so far is acknowledged (or failed).

        Raises :class:`TransactionWriteError` if ``timeout_s`` passes first or any record failed.
        Without a timeout the wait is bounded by the producer's ``delivery_timeout_ms``.
        """
        self._require(_WriterState.OPEN, "flush")
        assert self._producer is not None
        try:
            self._producer.flush(timeout=timeout_s)
        except kafka_errors.KafkaTimeoutError as exc:
            raise TransactionWriteError(
                f"records of transaction {self._transactional_id!r} were not acknowledged within "
                f"{timeout_s} s ({self.unacknowledged_bytes()} bytes outstanding)"
            ) from exc
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        with self._lock:
            failure = self._first_failure
            failed = self._sent - self._acknowledged
        if failure is not None:
            raise TransactionWriteError(
                f"{failed} record(s) of transaction {self._transactional_id!r} were not written: "
                f"{failure!r}"
            ) from failure

    def prepare(self) -> PreparedTransaction:
        """Pre-commit: make the transaction committable by any process; it stays open.

        1. Flush: every record sent is acknowledged by the partition leader (``acks=all``).
           A partition's batches are only sent after ``AddPartitionsToTxn`` registered the
           partition, so the coordinator now knows every partition the transaction wrote to.
        2. Refuse if any record failed or was never acknowledged: a commit would lose it.
        3. Refuse if the producer's (producer id, epoch) changed since :meth:`begin` (an epoch
           bump aborts the open transaction).
        4. Return the handle. The broker aborts the transaction on its own once it is older than
           ``transaction_timeout_ms``.
        """
        self.flush()  # 1 and 2
        with self._lock:
            sent, acknowledged = self._sent, self._acknowledged
        if acknowledged != sent:  # 2
            raise TransactionWriteError(
                f"transaction {self._transactional_id!r}: {sent - acknowledged} of {sent} "
                "record(s) not acknowledged after flush"
            )
        assert self._producer is not None
        current = self._producer._transaction_manager.producer_id_and_epoch
        if (current.producer_id, current.epoch) != (self._producer_id, self._epoch):  # 3
            raise TransactionWriteError(
                f"transaction {self._transactional_id!r} was opened as producer id "
                f"{self._producer_id}, epoch {self._epoch}, but the producer is now producer id "
                f"{current.producer_id}, epoch {current.epoch}: the broker aborted it"
            )
        self._state = _WriterState.PREPARED
        prepared = PreparedTransaction(
            transactional_id=self._transactional_id,
            producer_id=self._producer_id,
            epoch=self._epoch,
            record_count=acknowledged,
        )
        logger.debug("prepared %s with %d records", prepared.describe(), acknowledged)
        return prepared  # 4

    def abort(self) -> None:
        """Abort the transaction from this producer (open or prepared). No-op before begin."""
        if self._state in (_WriterState.NEW, _WriterState.ABORTED):
            return
        self._require_any((_WriterState.OPEN, _WriterState.PREPARED), "abort")
        assert self._producer is not None
        try:
            self._producer.abort_transaction()
        except kafka_errors.KafkaError as exc:
            raise TransactionAbortError(
                f"could not abort transaction {self._transactional_id!r} (producer id "
                f"{self._producer_id}, epoch {self._epoch}): {exc!r}"
            ) from exc
        self._state = _WriterState.ABORTED

    def close(self) -> None:
        """Release the producer. Never commits or aborts: a prepared transaction stays open."""
        if self._state is _WriterState.CLOSED:
            return
        producer, self._producer = self._producer, None
        self._state = _WriterState.CLOSED
        if producer is not None:
            # kafka-python's close flushes and stops the I/O thread; it sends no EndTxn.
            producer.close(timeout=_CLOSE_TIMEOUT_S)

    def __enter__(self) -> "TransactionalWriter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _require(self, state: _WriterState, action: str) -> None:
        self._require_any((state,), action)

    def _require_any(self, states: tuple[_WriterState, ...], action: str) -> None:
        if self._state not in states:
            raise TransactionWriteError(
                f"cannot {action} transaction {self._transactional_id!r}: the writer is "
                f"{self._state.value}"
            )


class _EndTxnOutcome(enum.Enum):
    """What an EndTxn asks the coordinator to do with a prepared transaction."""

    COMMIT = "commit"
    ABORT = "abort"


def commit_prepared(
    client_kwargs: Mapping[str, Any],
    prepared: PreparedTransaction,
    *,
    timeout_s: float = DEFAULT_END_TXN_TIMEOUT_S,
) -> None:
    """Commit a prepared transaction from any process, without ``init_transactions``.

    Idempotent: committing an already committed transaction succeeds. Raises
    :class:`TransactionCommitError` (naming transactional id, producer id and epoch) when the
    coordinator refuses: fenced (a newer epoch exists), aborted (``INVALID_TXN_STATE``, also after
    a ``transaction_timeout_ms`` expiry), or unknown id (``INVALID_PRODUCER_ID_MAPPING``); and
    :class:`KafkaUnavailableError` if the coordinator cannot be reached within ``timeout_s``.
    """
    commit_all_prepared(client_kwargs, [prepared], timeout_s=timeout_s)


def commit_all_prepared(
    client_kwargs: Mapping[str, Any],
    prepared: Sequence[PreparedTransaction],
    *,
    timeout_s: float = DEFAULT_END_TXN_TIMEOUT_S,
) -> None:
    """:func:`commit_prepared` for several transactions over one admin connection, in order.

    Stops at the first refusal (the ones before it stay committed; committing again is safe).
    """
    _end_all(client_kwargs, prepared, _EndTxnOutcome.COMMIT, timeout_s)


def abort_prepared(
    client_kwargs: Mapping[str, Any],
    prepared: PreparedTransaction,
    *,
    timeout_s: float = DEFAULT_END_TXN_TIMEOUT_S,
) -> None:
    """Abort a prepared transaction from any process (the resume-and-abort twin of commit).

    Aborting an already aborted transaction succeeds. Raises :class:`TransactionAbortError` if the
    coordinator refuses: already committed (``INVALID_TXN_STATE``), fenced, or unknown id.
    """
    _end_all(client_kwargs, [prepared], _EndTxnOutcome.ABORT, timeout_s)


def _end_all(
    client_kwargs: Mapping[str, Any],
    prepared: Sequence[PreparedTransaction],
    outcome: _EndTxnOutcome,
    timeout_s: float,
) -> None:
    to_end = [p for p in prepared if p.record_count > 0]
    for p in prepared:
        if p.record_count == 0:
            logger.debug("%s has no records: nothing to %s", p.describe(), outcome.value)
    if not to_end:
        return
    deadline = time.monotonic() + timeout_s
    with _admin_client(client_kwargs) as admin:
        for p in to_end:
            _end_transaction(admin, p, outcome, deadline, client_kwargs)


def _end_transaction(
    admin: KafkaAdminClient,
    prepared: PreparedTransaction,
    outcome: _EndTxnOutcome,
    deadline: float,
    client_kwargs: Mapping[str, Any],
) -> None:
    """Send EndTxn until the coordinator answers with success or a refusal, or time runs out."""
    backoff = _FIRST_BACKOFF_S
    attempts = 0
    while True:
        attempts += 1
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:
            error_type = admin._manager.run(
                _async_end_transaction, admin, prepared, outcome, remaining_ms
            )
        except _TRANSPORT_ERRORS as exc:
            last: BaseException | type[BaseException] = exc
        else:
            if error_type is kafka_errors.NoError:
                logger.debug(
                    "%s: %s after %d attempt(s)", outcome.value, prepared.describe(), attempts
                )
                return
            if not issubclass(error_type, kafka_errors.RetriableError):
                raise _refusal(prepared, outcome, error_type)
            last = error_type
        if time.monotonic() + backoff >= deadline:
            if isinstance(last, BaseException):
                raise KafkaUnavailableError(
                    f"could not {outcome.value} {prepared.describe()}: the transaction "
                    f"coordinator on {_servers(client_kwargs)} was not reached in time "
                    f"({attempts} attempts, last error {last!r})"
                ) from last
            error_class = (
                TransactionCommitError
                if outcome is _EndTxnOutcome.COMMIT
                else TransactionAbortError
            )
            raise error_class(
                f"could not {outcome.value} {prepared.describe()}: the coordinator still "
                f"answered {_error_name(last)} after {attempts} attempts"
            )
        logger.debug(
            "%s %s: %s, retrying in %.2f s",
            outcome.value,
            prepared.describe(),
            _error_name(last),
            backoff,
        )
        time.sleep(backoff)
        backoff = min(backoff * 2, _MAX_BACKOFF_S)


async def _async_end_transaction(
    admin: KafkaAdminClient,
    prepared: PreparedTransaction,
    outcome: _EndTxnOutcome,
    request_timeout_ms: int,
) -> type[kafka_errors.KafkaError]:
    """Runs on the admin client's I/O thread: FindCoordinator, then EndTxn to the coordinator.

    Returns the broker's error class (``NoError`` on success); transport failures raise.
    """
    manager = admin._manager
    find = FindCoordinatorRequest(
        key=prepared.transactional_id,
        key_type=CoordinatorType.TRANSACTION.value,
        coordinator_keys=[prepared.transactional_id],
    )
    response = await manager.send(find, request_timeout_ms=request_timeout_ms)
    found = response.coordinators[0] if response.coordinators else response
    find_error = kafka_errors.for_code(found.error_code)
    if find_error is not kafka_errors.NoError:
        return find_error
    node_id = manager.cluster.add_coordinator(
        found, CoordinatorType.TRANSACTION, prepared.transactional_id, synthesize_node_id=False
    )
    end = EndTxnRequest(
        transactional_id=prepared.transactional_id,
        producer_id=prepared.producer_id,
        producer_epoch=prepared.epoch,
        committed=outcome is _EndTxnOutcome.COMMIT,
        max_version=END_TXN_MAX_VERSION,
    )
    response = await manager.send(end, node_id=node_id, request_timeout_ms=request_timeout_ms)
    return kafka_errors.for_code(response.error_code)


def _refusal(
    prepared: PreparedTransaction,
    outcome: _EndTxnOutcome,
    error_type: type[kafka_errors.KafkaError],
) -> Exception:
    name = _error_name(error_type)
    if error_type in (kafka_errors.ProducerFencedError, kafka_errors.InvalidProducerEpochError):
        reason = "a newer producer epoch exists for this id (fenced, or aborted on recovery)"
    elif error_type is kafka_errors.InvalidTxnStateError:
        reason = (
            "the transaction was already aborted (by an abort, a fence or transaction timeout)"
            if outcome is _EndTxnOutcome.COMMIT
            else "the transaction was already committed"
        )
    elif error_type is kafka_errors.InvalidProducerIdMappingError:
        reason = "the coordinator does not know this transactional id with this producer id"
    else:
        reason = "unexpected answer"
    message = f"coordinator refused to {outcome.value} {prepared.describe()}: {name} ({reason})"
    if outcome is _EndTxnOutcome.COMMIT:
        return TransactionCommitError(
            message + f"; its {prepared.record_count} record(s) are not committed"
        )
    return TransactionAbortError(message)


def _error_name(error: BaseException | type[BaseException]) -> str:
    error_type = error if isinstance(error, type) else type(error)
    return str(getattr(error_type, "message", None) or error_type.__name__)


def fence(client_kwargs: Mapping[str, Any], transactional_id: str) -> None:
    """Abort whatever transaction ``transactional_id`` has open, by ``init_transactions``.

    ``init_transactions`` bumps the id's epoch; the coordinator aborts an open transaction (its
    records become invisible to read_committed consumers) or lets a decided commit finish first,
    and answers only once the previous transaction is complete. An unknown id is simply
    registered. Any later commit with the old epoch fails with ``PRODUCER_FENCED``.
    """
    kwargs = dict(client_kwargs)
    kwargs["transactional_id"] = transactional_id
    producer = _build_producer(kwargs)
    try:
        producer.init_transactions()
    except kafka_errors.KafkaError as exc:
        raise TransactionAbortError(
            f"could not fence transactional id {transactional_id!r} on "
            f"{_servers(client_kwargs)}: {exc!r}"
        ) from exc
    finally:
        producer.close(timeout=_CLOSE_TIMEOUT_S)
    logger.info("fenced transactional id %r", transactional_id)


def list_transactional_ids(
    client_kwargs: Mapping[str, Any], prefix: str, *, open_only: bool = True
) -> list[str]:
    """Transactional ids starting with ``prefix`` that the brokers' coordinators know (sorted).

    ``open_only`` keeps ids whose transaction is unfinished (:data:`OPEN_TRANSACTION_STATES`);
    otherwise ids in any state, including ``Empty``, ``CompleteCommit`` and ``CompleteAbort``.
    Filtering happens here, not on the broker, so it works with brokers before 4.1.
    """
    with _admin_client(client_kwargs) as admin:
        by_broker = admin.list_transactions()
    found = {
        listing.transactional_id
        for listings in by_broker.values()
        for listing in listings
        if listing.transactional_id.startswith(prefix)
        and (not open_only or listing.state in OPEN_TRANSACTION_STATES)
    }
    return sorted(found)


def broker_max_transaction_timeout_ms(client_kwargs: Mapping[str, Any]) -> int:
    """The brokers' ``transaction.max.timeout.ms`` (the smallest, if brokers differ).

    A producer's ``transaction_timeout_ms`` above it is refused by ``init_transactions``.
    """
    name = "transaction.max.timeout.ms"
    with _admin_client(client_kwargs) as admin:
        broker_ids = [broker["broker_id"] for broker in admin.describe_cluster()["brokers"]]
        resources = [
            ConfigResource(ConfigResourceType.BROKER, str(broker_id), [name])
            for broker_id in broker_ids
        ]
        described = admin.describe_configs(resources, config_filter="all")
    values: list[int] = []
    for broker_id in broker_ids:
        entry = described.get("broker", {}).get(str(broker_id), {}).get(name)
        if entry is None or entry.get("value") is None:
            raise SinkConfigurationError(
                f"broker {broker_id} on {_servers(client_kwargs)} did not report {name}"
            )
        values.append(int(entry["value"]))
    if not values:
        raise SinkConfigurationError(f"no brokers listed by {_servers(client_kwargs)}")
    return min(values)


# --- clients ----------------------------------------------------------------------------------


def _servers(client_kwargs: Mapping[str, Any]) -> str:
    servers = client_kwargs.get("bootstrap_servers", "localhost")
    if isinstance(servers, (list, tuple)):
        return ",".join(str(s) for s in servers)
    return str(servers)


def admin_client_kwargs(client_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of producer kwargs a ``KafkaAdminClient`` accepts (it rejects unknown keys)."""
    return {k: v for k, v in client_kwargs.items() if k in KafkaAdminClient.DEFAULT_CONFIG}


@contextmanager
def _admin_client(client_kwargs: Mapping[str, Any]) -> Iterator[KafkaAdminClient]:
    try:
        admin = KafkaAdminClient(**admin_client_kwargs(client_kwargs))
    except kafka_errors.KafkaTimeoutError as exc:
        raise KafkaUnavailableError(
            f"could not reach Kafka at {_servers(client_kwargs)}: {exc!r}"
        ) from exc
    try:
        yield admin
    finally:
        admin.close()


def _build_producer(kwargs: Mapping[str, Any]) -> KafkaProducer:
    try:
        return KafkaProducer(**kwargs)
    except kafka_errors.KafkaTimeoutError as exc:
        raise KafkaUnavailableError(
            f"could not reach Kafka at {_servers(kwargs)}: {exc!r}"
        ) from exc


def _payload_size(
    key: Optional[bytes], value: Optional[bytes], headers: Optional[list[tuple[str, bytes]]]
) -> int:
    size = (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        for header_key, header_value in headers:
            size += len(header_key) + len(header_value)
    return size
