"""What the transaction coordinators know about transactional ids: listing and describing.

The sink asks two questions of the coordinators, never of its own bookkeeping:

- *Which of my ids have a transaction open?* (:func:`list_transactional_ids`) — for clean-up,
  which fences every open transaction that no commit record names. The request is filtered by
  state on the broker, and by the id pattern where the broker supports it (Kafka 4.1+,
  KIP-1152), so a cluster with many transactional ids is not listed whole at every batch.
- *Can these prepared transactions still commit?* (:func:`describe_transactions`,
  :func:`commit_blockers`) — before a batch is decided: a transaction the broker has already
  aborted (``kafka.transaction.timeout.ms`` passed) or that another producer fenced would make
  the decision impossible to carry out. Asked with one ``FindCoordinator`` for all ids and one
  ``DescribeTransactions`` per coordinator (our own requests on the kept admin client's
  connections: kafka-python's ``describe_transactions`` fails the whole call for one id its
  coordinator never saw).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient, TransactionDescription, TransactionState
from kafka.protocol.admin import DescribeTransactionsRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.structs import TopicPartition

from unaligned.kafka.clients.admin_clients import ask_admin
from unaligned.kafka.clients.authorization import TRANSACTIONAL_ID, RequestRefused, Resource
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.transactions.transactions import PreparedTransaction

OPEN_TRANSACTION_STATES = frozenset(
    {
        TransactionState.ONGOING,
        TransactionState.PREPARE_COMMIT,
        TransactionState.PREPARE_ABORT,
        TransactionState.PREPARE_EPOCH_FENCE,
    }
)
"""States of an unfinished transaction. ``PrepareCommit``/``PrepareAbort`` last until the
markers are written (milliseconds): a transaction just committed may briefly be listed as open."""


def list_transactional_ids(
    client_kwargs: Mapping[str, Any], prefix: str, *, open_only: bool = True
) -> list[str]:
    """Sorted transactional ids starting with ``prefix`` known to the coordinators.

    ``open_only`` keeps ids in :data:`OPEN_TRANSACTION_STATES` (filtered by the broker);
    otherwise any state (``Empty``, ``CompleteCommit``, ``CompleteAbort``...). The id pattern is
    sent to brokers that support it and applied here as well, so older brokers work too.
    """
    states = sorted(s.value for s in OPEN_TRANSACTION_STATES) if open_only else None
    pattern = "^" + re.escape(prefix) + ".*"

    def listing(admin: KafkaAdminClient) -> Any:
        try:
            return admin.list_transactions(state_filters=states, transactional_id_pattern=pattern)
        except kafka_errors.UnsupportedVersionError:
            return admin.list_transactions(state_filters=states)

    by_broker = ask_admin(client_kwargs, "listing the sink's transactions", listing)
    return sorted(
        {
            listing.transactional_id
            for listings in by_broker.values()
            for listing in listings
            if listing.transactional_id.startswith(prefix)
            and (not open_only or listing.state in OPEN_TRANSACTION_STATES)
        }
    )


def describe_transactions(
    client_kwargs: Mapping[str, Any], transactional_ids: Iterable[str]
) -> dict[str, TransactionDescription | None]:
    """Each id's transaction as its coordinator describes it; ``None`` for an id it never saw.

    Asked through the process's kept admin client
    (:func:`~unaligned.kafka.clients.admin_clients.ask_admin`): every Kafka sink task asks this
    before it begins. A coordinator not ready (its transaction state log still loading: a fresh
    cluster, or its leader moved), a broker lost or no connection ready to take the question is
    asked again, as Kafka's own clients do, on a new client until
    ``kafka.default.api.timeout.ms``: the kept one is dropped with its cached coordinators,
    which kafka-python does not forget when one answers ``NOT_COORDINATOR``."""
    ids = sorted(set(transactional_ids))
    if not ids:
        return {}
    return ask_admin(
        client_kwargs,
        "describing the sink's transactions",
        lambda admin: connection_manager(admin).run(_describe_all, connection_manager(admin), ids),
    )


async def _describe_all(
    manager: Any, ids: Sequence[str]
) -> dict[str, TransactionDescription | None]:
    """One ``FindCoordinator`` for every id (v4 takes many keys), then one
    ``DescribeTransactions`` per coordinator for all its ids: a batch of a thousand sink tasks
    is one request per coordinator, not one per id. An id its coordinator never saw
    (``TRANSACTIONAL_ID_NOT_FOUND``) is ``None``; a refused Describe is raised as
    ``RequestRefused``; any other error is raised (retriable ones are asked again by the
    caller on a new client)."""
    find = FindCoordinatorRequest(
        key_type=CoordinatorType.TRANSACTION.value, coordinator_keys=list(ids), min_version=4
    )
    found = await manager.send(find)
    by_node: dict[int, list[str]] = {}
    for coordinator in found.coordinators:
        error = kafka_errors.for_code(int(coordinator.error_code))
        if error is kafka_errors.TransactionalIdAuthorizationFailedError:
            raise RequestRefused(
                "FindCoordinator", Resource(TRANSACTIONAL_ID, coordinator.key), ["Describe"]
            )
        if error is not kafka_errors.NoError:
            raise error(f"FindCoordinator for {coordinator.key!r}")
        node = manager.cluster.add_coordinator(
            coordinator, CoordinatorType.TRANSACTION, coordinator.key, synthesize_node_id=False
        )
        by_node.setdefault(int(node), []).append(coordinator.key)
    pending = [
        (node, manager.send(DescribeTransactionsRequest(transactional_ids=tids), node_id=node))
        for node, tids in by_node.items()
    ]
    out: dict[str, TransactionDescription | None] = {}
    for node, future in pending:
        response = await future
        for txn in response.transaction_states:
            error = kafka_errors.for_code(int(txn.error_code))
            if error is kafka_errors.TransactionalIdNotFoundError:
                out[txn.transactional_id] = None
                continue
            if error is kafka_errors.TransactionalIdAuthorizationFailedError:
                resource = Resource(TRANSACTIONAL_ID, txn.transactional_id)
                raise RequestRefused("DescribeTransactions", resource, ["Describe"])
            if error is not kafka_errors.NoError:
                raise error(f"DescribeTransactions for {txn.transactional_id!r}")
            out[txn.transactional_id] = TransactionDescription(
                coordinator_id=node,
                state=TransactionState(txn.transaction_state),
                producer_id=int(txn.producer_id),
                producer_epoch=int(txn.producer_epoch),
                transaction_timeout_ms=int(txn.transaction_timeout_ms),
                transaction_start_time_ms=int(txn.transaction_start_time_ms),
                topic_partitions={
                    TopicPartition(t.topic, p) for t in txn.topics for p in t.partitions
                },
            )
    missing = [tid for tid in ids if tid not in out]
    if missing:
        raise kafka_errors.CoordinatorNotAvailableError(f"no answer for {missing[:3]}")
    return out


def is_open(description: TransactionDescription | None) -> bool:
    """True if the id has an unfinished transaction (someone may still commit or abort it)."""
    return description is not None and description.state in OPEN_TRANSACTION_STATES


_ABORTING = frozenset({TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT})


def fenced(prepared: PreparedTransaction, description: TransactionDescription | None) -> bool:
    """True if another producer took ``prepared``'s id after it (``InitProducerId``: another
    attempt of the task, or a zombie), rather than the broker aborting it on its timeout (which
    bumps the epoch once and leaves the id aborting or aborted)."""
    if description is None or description.producer_id != prepared.producer_id:
        return description is not None
    if description.producer_epoch <= prepared.epoch:
        return False
    timed_out = description.state in _ABORTING and description.producer_epoch == prepared.epoch + 1
    return not timed_out


def commit_blockers(
    prepared: Sequence[PreparedTransaction],
    descriptions: Mapping[str, TransactionDescription | None],
    now_ms: int,
    margin_ms: int,
) -> list[str]:
    """Why each of ``prepared`` could not be committed now (empty: all can).

    A prepared transaction can be committed only while its coordinator still has it ``Ongoing``
    under the same producer id and epoch, and it must stay so for ``margin_ms`` more, the time
    the commit itself may take (the broker aborts it ``transaction_timeout_ms`` after it began).
    A transaction with no records never reached the coordinator and needs no commit.
    """
    reasons = []
    for p in prepared:
        if p.record_count == 0:
            continue
        d = descriptions.get(p.transactional_id)
        if d is None:
            reasons.append(f"{p.describe()}: unknown to its coordinator")
        elif fenced(p, d):
            reasons.append(
                f"{p.describe()}: the coordinator has it {d.state.value} under producer id "
                f"{d.producer_id}, epoch {d.producer_epoch} (fenced by another producer with the "
                "same id: another attempt of the task took it)"
            )
        elif d.state != TransactionState.ONGOING:
            reasons.append(
                f"{p.describe()}: the coordinator has it {d.state.value} (aborted by the "
                "transaction timeout)"
            )
        elif (d.producer_id, d.producer_epoch) != (p.producer_id, p.epoch):
            reasons.append(
                f"{p.describe()}: the coordinator has producer id {d.producer_id}, epoch "
                f"{d.producer_epoch} (fenced by another producer with the same id)"
            )
        else:
            left_ms = d.transaction_start_time_ms + d.transaction_timeout_ms - now_ms
            if left_ms < margin_ms:
                reasons.append(
                    f"{p.describe()}: began {(now_ms - d.transaction_start_time_ms) / 1000:.1f} s "
                    f"ago and the broker aborts it {d.transaction_timeout_ms / 1000:.1f} s after "
                    f"it began ({max(left_ms, 0) / 1000:.1f} s left, {margin_ms / 1000:.1f} s "
                    "needed to commit)"
                )
    return reasons
