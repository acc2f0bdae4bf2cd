"""Ending prepared Kafka transactions by handle, from any process.

A :class:`~unaligned.kafka.transactions.transactions.PreparedTransaction` (transactional id,
producer id, epoch) prepared on an executor is committed or aborted by the driver, possibly in
another OS process (:func:`commit_prepared`, :func:`commit_all_prepared`, :func:`abort_prepared`),
by sending ``FindCoordinator`` and ``EndTxn(id, producer id, epoch)`` itself on the connection
manager of the process's kept admin client (:mod:`unaligned.kafka.clients.client_internals`), never
``init_transactions`` (which would abort it). Recovery and clean-up end other open transactions
of the sink's ids by fencing them (:func:`fence`, :func:`fence_all`). ``EndTxn`` is capped at v3
(transaction protocol v1: committing a completed transaction again succeeds). Coordinator
answers: success or a repeated commit -> done; ``CONCURRENT_TRANSACTIONS``, a coordinator moved
or loading, transport errors, a broker the metadata no longer lists -> retried with backoff until
``timeout_s`` (``FindCoordinator`` again each time); ``PRODUCER_FENCED``, ``INVALID_TXN_STATE``,
``INVALID_PRODUCER_ID_MAPPING`` -> :class:`TransactionCommitError` /
:class:`TransactionAbortError` naming the transaction. ARCHITECTURE.md ("The two-phase commit",
step 2c, and "Private APIs the project pins") has the rest; ``integration/
test_kafka_transactions.py`` proves a transaction prepared by a dead process commits.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from unaligned.errors import (
    KafkaUnavailableError,
    SinkConfigurationError,
    TransactionAbortError,
    TransactionCommitError,
)
from unaligned.kafka.clients.admin_clients import (
    ask_admin,
    ask_each_broker,
    broker_setting,
    shared_admin_client,
)
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.clients.client_options import api_timeout_ms
from unaligned.kafka.clients.connections import build_producer, describe_servers
from unaligned.kafka.clients.retries import call_until, is_retriable
from unaligned.kafka.transactions.transactions import PreparedTransaction

logger = logging.getLogger(__name__)

END_TXN_MAX_VERSION = 3  # v4 only adds error codes; v5 is transaction protocol v2
DEFAULT_END_TXN_TIMEOUT_S = 60.0
_END_TXN_WINDOW = 16  # EndTxn requests in flight at once; the admin client allows one more
PRODUCER_CLOSE_TIMEOUT_S = 10.0
_FIRST_BACKOFF_S = 0.02
_MAX_BACKOFF_S = 1.0

# An answer to one EndTxn: the broker's error class (NoError on success), or the retriable
# exception that stopped the request from being answered (connection lost, timed out).
_Answer = type | BaseException


class _EndTxnOutcome(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"


def commit_prepared(
    client_kwargs: Mapping[str, Any],
    prepared: PreparedTransaction,
    *,
    timeout_s: float = DEFAULT_END_TXN_TIMEOUT_S,
) -> None:
    """Commit a prepared transaction from any process, without ``init_transactions``.

    Idempotent: committing a committed transaction succeeds. Raises
    :class:`TransactionCommitError` naming the transactional id, producer id and epoch if the
    coordinator refuses (fenced, aborted -- also by ``transaction_timeout_ms`` --, unknown id), and
    :class:`KafkaUnavailableError` if the coordinator is not reached within ``timeout_s``.
    """
    commit_all_prepared(client_kwargs, [prepared], timeout_s=timeout_s)


def commit_all_prepared(
    client_kwargs: Mapping[str, Any],
    prepared: Sequence[PreparedTransaction],
    *,
    timeout_s: float = DEFAULT_END_TXN_TIMEOUT_S,
) -> None:
    """:func:`commit_prepared` for many transactions, pipelined over one admin connection.

    Every transaction that can be committed is; then the first refusal is raised.
    """
    _end_all(client_kwargs, prepared, _EndTxnOutcome.COMMIT, timeout_s)


def abort_prepared(
    client_kwargs: Mapping[str, Any],
    prepared: PreparedTransaction,
    *,
    timeout_s: float = DEFAULT_END_TXN_TIMEOUT_S,
) -> None:
    """Abort a prepared transaction from any process. Aborting it again succeeds.

    Raises :class:`TransactionAbortError` if the coordinator refuses: already committed
    (``INVALID_TXN_STATE``), fenced, or unknown id.
    """
    _end_all(client_kwargs, [prepared], _EndTxnOutcome.ABORT, timeout_s)


def _end_all(
    client_kwargs: Mapping[str, Any],
    prepared: Sequence[PreparedTransaction],
    outcome: _EndTxnOutcome,
    timeout_s: float,
) -> None:
    """Send EndTxn for every transaction with records; retry the retriable answers in rounds.

    Refusals are collected and the first is raised once nothing is left to retry."""
    pending = [p for p in prepared if p.record_count > 0]
    deadline = time.monotonic() + timeout_s
    backoff = _FIRST_BACKOFF_S
    rounds = 0
    refused: list[tuple[PreparedTransaction, _Answer]] = []
    if not pending:
        return
    with shared_admin_client(client_kwargs, max_in_flight=_END_TXN_WINDOW + 1) as admin:
        while pending:
            rounds += 1
            remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
            answers: list[_Answer] = []
            for start in range(0, len(pending), _END_TXN_WINDOW):
                window = pending[start : start + _END_TXN_WINDOW]
                answers += _run_window(admin, window, outcome, remaining_ms)
            retry = [(p, a) for p, a in zip(pending, answers, strict=True) if _is_retriable(a)]
            refused += [
                (p, a)
                for p, a in zip(pending, answers, strict=True)
                if a is not kafka_errors.NoError and not _is_retriable(a)
            ]
            if not retry:
                break
            if time.monotonic() + backoff >= deadline:
                raise _out_of_time(retry[0][0], retry[0][1], outcome, rounds, client_kwargs)
            logger.info(
                "%s: %d of %d transaction(s) answered %s, retrying in %.2f s",
                outcome.value,
                len(retry),
                len(pending),
                _error_name(retry[0][1]),
                backoff,
            )
            time.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
            pending = [p for p, _ in retry]
    for other, answer in refused[1:]:
        logger.error("%s", _refusal(other, outcome, answer))
    if refused:
        first, answer = refused[0]
        raise _refusal(first, outcome, answer)


def _run_window(
    admin: KafkaAdminClient,
    window: Sequence[PreparedTransaction],
    outcome: _EndTxnOutcome,
    request_timeout_ms: int,
) -> list[_Answer]:
    try:
        answers: list[_Answer] = connection_manager(admin).run(
            _async_end_window, admin, window, outcome, request_timeout_ms
        )
        return answers
    except kafka_errors.KafkaError as exc:
        if is_retriable(exc):  # the whole window failed to go out: every one is asked again
            return [exc for _ in window]
        # not a broker answer: unsupported version, auth...
        error = (
            TransactionCommitError if outcome is _EndTxnOutcome.COMMIT else TransactionAbortError
        )
        raise error(
            f"could not {outcome.value} {', '.join(p.describe() for p in window)}: {exc!r}"
        ) from exc


def _is_retriable(answer: _Answer) -> bool:
    return isinstance(answer, BaseException) or (
        answer is not kafka_errors.NoError and is_retriable(answer)
    )


async def _async_end_window(
    admin: KafkaAdminClient,
    window: Sequence[PreparedTransaction],
    outcome: _EndTxnOutcome,
    request_timeout_ms: int,
) -> list[_Answer]:
    """On the admin's I/O thread: end each transaction of the window concurrently."""
    manager = connection_manager(admin)
    tasks = [
        manager.call_soon(_async_end_one, admin, p, outcome, request_timeout_ms) for p in window
    ]
    answers: list[_Answer] = []
    for task in tasks:
        try:
            answers.append(await task)
        except kafka_errors.KafkaError as exc:  # transport, or a broker no longer listed
            if not is_retriable(exc):
                raise
            answers.append(exc)
    return answers


async def _async_end_one(
    admin: KafkaAdminClient,
    prepared: PreparedTransaction,
    outcome: _EndTxnOutcome,
    request_timeout_ms: int,
) -> type:
    """FindCoordinator, then EndTxn to that coordinator; returns the broker's error class."""
    manager = connection_manager(admin)
    key = prepared.transactional_id
    find = FindCoordinatorRequest(
        key=key, key_type=CoordinatorType.TRANSACTION.value, coordinator_keys=[key]
    )
    response = await manager.send(find, request_timeout_ms=request_timeout_ms)
    found = response.coordinators[0] if response.coordinators else response
    if found.error_code != 0:
        find_error: type = kafka_errors.for_code(found.error_code)
        return find_error
    node_id = manager.cluster.add_coordinator(
        found, CoordinatorType.TRANSACTION, key, synthesize_node_id=False
    )
    end = EndTxnRequest(
        transactional_id=key,
        producer_id=prepared.producer_id,
        producer_epoch=prepared.epoch,
        committed=outcome is _EndTxnOutcome.COMMIT,
        max_version=END_TXN_MAX_VERSION,
    )
    response = await manager.send(end, node_id=node_id, request_timeout_ms=request_timeout_ms)
    end_error: type = kafka_errors.for_code(response.error_code)
    return end_error


def _refusal(prepared: PreparedTransaction, outcome: _EndTxnOutcome, answer: _Answer) -> Exception:
    if answer in (kafka_errors.ProducerFencedError, kafka_errors.InvalidProducerEpochError):
        reason = "a newer epoch of this id exists: something ended this transaction"
    elif answer is kafka_errors.InvalidTxnStateError and outcome is _EndTxnOutcome.COMMIT:
        reason = "already aborted"
    elif answer is kafka_errors.InvalidTxnStateError:
        reason = "already committed"
    elif answer is kafka_errors.InvalidProducerIdMappingError:
        reason = "the coordinator does not know this id with this producer id"
    else:
        reason = "unexpected answer"
    message = (
        f"coordinator refused to {outcome.value} {prepared.describe()}: "
        f"{_error_name(answer)} ({reason})"
    )
    if outcome is _EndTxnOutcome.COMMIT:
        return TransactionCommitError(
            f"{message}; unless an earlier commit of it succeeded, its {prepared.record_count} "
            "record(s) are lost"
        )
    return TransactionAbortError(message)


def _out_of_time(
    prepared: PreparedTransaction,
    answer: _Answer,
    outcome: _EndTxnOutcome,
    rounds: int,
    client_kwargs: Mapping[str, Any],
) -> Exception:
    if isinstance(answer, BaseException):
        return KafkaUnavailableError(
            f"could not {outcome.value} {prepared.describe()}: the transaction coordinator on "
            f"{describe_servers(client_kwargs)} did not answer in time ({rounds} attempts, "
            f"last error {answer!r})"
        )
    error = TransactionCommitError if outcome is _EndTxnOutcome.COMMIT else TransactionAbortError
    return error(
        f"could not {outcome.value} {prepared.describe()}: the coordinator still answered "
        f"{_error_name(answer)} after {rounds} attempts"
    )


def _error_name(answer: _Answer) -> str:
    error_type = answer if isinstance(answer, type) else type(answer)
    return str(getattr(error_type, "message", None) or error_type.__name__)


def fence(client_kwargs: Mapping[str, Any], transactional_id: str) -> None:
    """Abort whatever transaction ``transactional_id`` has open, by ``init_transactions``.

    The epoch bump makes the coordinator abort an open transaction (or finish a decided commit)
    and answer once it is complete, so its records are settled when this returns. A later commit
    with the old epoch fails with ``PRODUCER_FENCED``. An unknown id is simply registered.
    """

    def attempt(_deadline: float) -> None:
        producer = build_producer({**client_kwargs, "transactional_id": transactional_id})
        try:
            producer.init_transactions()
        finally:
            producer.close(timeout=PRODUCER_CLOSE_TIMEOUT_S)

    try:
        call_until(
            attempt,
            doing=f"fencing transactional id {transactional_id!r}",
            servers=describe_servers(client_kwargs),
            timeout_ms=api_timeout_ms(client_kwargs),
        )
    except kafka_errors.KafkaError as exc:
        raise TransactionAbortError(
            f"could not fence transactional id {transactional_id!r} on "
            f"{describe_servers(client_kwargs)}: {exc!r}"
        ) from exc
    logger.info("fenced transactional id %r", transactional_id)


_FENCE_THREADS = 8


def fence_all(client_kwargs: Mapping[str, Any], transactional_ids: Sequence[str]) -> None:
    """:func:`fence` every id at once, each with a producer of its own (``init_transactions``
    waits while the coordinator aborts the open transaction: one after another, a restart that
    finds a leftover per task waited that long per task). The first failure is raised once
    every fence has ended."""
    if len(transactional_ids) <= 1:
        for tid in transactional_ids:
            fence(client_kwargs, tid)
        return
    with ThreadPoolExecutor(min(len(transactional_ids), _FENCE_THREADS)) as pool:
        futures = [pool.submit(fence, client_kwargs, tid) for tid in transactional_ids]
    for future in futures:
        failure = future.exception()
        if failure is not None:
            raise failure


def broker_max_transaction_timeout_ms(client_kwargs: Mapping[str, Any]) -> int:
    """The brokers' ``transaction.max.timeout.ms`` (the smallest if they differ).

    ``init_transactions`` refuses a ``transaction_timeout_ms`` above it. Asked through the
    process's kept admin client, which the planner then uses for the topic check and the
    listing of open transactions (one bootstrap, not three). Each broker is asked on its own: a
    broker that is away (killed, restarting; the cluster may still list it) is left out, as long
    as one answers."""
    name = "transaction.max.timeout.ms"

    def value(admin: KafkaAdminClient, node: int) -> int:
        setting = broker_setting(admin, node, name)
        if setting is None:
            raise SinkConfigurationError(
                f"broker {node} on {describe_servers(client_kwargs)} did not report {name}"
            )
        return int(setting)

    def ask(admin: KafkaAdminClient) -> dict[int, int]:
        return ask_each_broker(admin, lambda node: value(admin, node))

    values = ask_admin(client_kwargs, f"asking the brokers' {name}", ask)
    if not values:
        raise SinkConfigurationError(f"{describe_servers(client_kwargs)} listed no brokers")
    return min(values.values())
