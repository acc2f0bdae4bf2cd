"""Whether the sink's principal may run its transactions, asked as its tasks will ask.

Before any task of a query opens a transaction, Spark's planner sends ``FindCoordinator`` and
``InitProducerId`` for one dedicated id of the sink's prefix, :func:`probe_id`
(``<prefix>-probe``: never an id of the pool, whose ids end in digits), with the sink's
transaction timeout, as :meth:`~unaligned.kafka.transactions.coordinator_requests.
CoordinatorRequests.init_producer_id` does for a task. The broker answers it exactly as it will
answer the tasks (Kafka 4.4's ``KafkaApis``), and needs no Cluster permission to:

- ``FindCoordinator`` refused: the principal lacks TransactionalId ``Describe``;
- ``InitProducerId`` refused: it lacks TransactionalId ``Write``; with ``enable2Pc`` (KIP-939)
  also ``TwoPhaseCommit`` (the broker gives the same answer when its
  ``transaction.two.phase.commit.enable`` is false);
- ``INVALID_TRANSACTION_TIMEOUT``: the timeout is above the brokers'
  ``transaction.max.timeout.ms``.

The probe id holds no transaction: ``InitProducerId`` only registers it with its coordinator
(and bumps its epoch). :func:`probe` raises what the broker answered; the sink words it
(:mod:`unaligned.sink.topics.kafka_checks`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kafka.admin import KafkaAdminClient

from unaligned.kafka.clients.admin_clients import ask_admin
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.clients.client_options import api_timeout_ms
from unaligned.kafka.transactions.coordinator_requests import CoordinatorRequests

PROBE_SUFFIX = "probe"


def probe_id(prefix: str) -> str:
    """The probe's transactional id for the sink's ``prefix`` (the only place it is spelled)."""
    return f"{prefix}-{PROBE_SUFFIX}"


def probe(
    client_kwargs: Mapping[str, Any],
    transactional_id: str,
    transaction_timeout_ms: int,
    two_phase_commit: bool,
) -> None:
    """``InitProducerId`` on ``transactional_id`` (module docstring). Raises
    :class:`~unaligned.kafka.clients.authorization.RequestRefused` for a refused permission,
    ``InvalidTransactionTimeoutError``, or :class:`~unaligned.errors.KafkaUnavailableError`
    when the coordinator cannot be reached within ``kafka.default.api.timeout.ms``."""
    request_timeout_ms = int(client_kwargs.get("request_timeout_ms", 30_000))

    def ask(admin: KafkaAdminClient) -> None:
        manager = connection_manager(admin)
        calls = CoordinatorRequests(
            manager,
            transactional_id,
            request_timeout_ms,
            transaction_timeout_ms,
            two_phase_commit,
        )
        deadline = time.monotonic() + api_timeout_ms(client_kwargs) / 1000
        manager.run(calls.init_producer_id, deadline)

    ask_admin(client_kwargs, f"probing transactional id {transactional_id!r}", ask)
