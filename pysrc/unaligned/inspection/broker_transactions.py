"""The one part of ``unaligned inspect`` that asks the broker: the query's open transactions.

The sink's Kafka options (``kafka.bootstrap.servers``, security settings,
``transactionalIdPrefix``) are options of the running query and are not stored in its
checkpoint, so the caller names the cluster (``--bootstrap-servers``) and, when the query set
one, the prefix (``--transactional-id-prefix``). Only plaintext connections are made here.

An open transaction whose id an in-doubt commit record names is committed when the query
restarts (its batch is rolled forward); any other is fenced by the sink's clean-up.
"""

from __future__ import annotations

from collections.abc import Sequence

import kafka.errors as kafka_errors

from unaligned.errors import KafkaUnavailableError
from unaligned.inspection.model import InDoubtBatch, OpenTransaction
from unaligned.kafka.transactions.transaction_states import (
    describe_transactions,
    list_transactional_ids,
)

BOOTSTRAP_TIMEOUT_MS = 10_000
"""How long an unreachable cluster is tried before the inspection reports it."""


def open_transactions(
    bootstrap_servers: str, prefix: str, in_doubt: Sequence[InDoubtBatch]
) -> tuple[OpenTransaction, ...]:
    """The open transactions of ``prefix`` on the cluster, described, each with the in-doubt
    batch whose record names it. Raises
    :class:`~unaligned.errors.KafkaUnavailableError` when the cluster cannot be reached."""
    client = {
        "bootstrap_servers": bootstrap_servers,
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        "reconnect_backoff_max_ms": 1000,
    }
    try:
        ids = list_transactional_ids(client, prefix)
        descriptions = describe_transactions(client, ids)
    except kafka_errors.KafkaError as exc:
        raise KafkaUnavailableError(
            f"could not list the transactions of prefix {prefix!r} at {bootstrap_servers}: {exc!r}"
        ) from exc
    named_by = {tid: batch.batch_id for batch in in_doubt for tid in batch.transactional_ids}
    result = []
    for tid in ids:
        description = descriptions.get(tid)
        if description is None:
            result.append(OpenTransaction(tid, None, None, None, None, None, named_by.get(tid)))
            continue
        result.append(
            OpenTransaction(
                transactional_id=tid,
                state=description.state.value,
                producer_id=description.producer_id,
                producer_epoch=description.producer_epoch,
                start_ms=description.transaction_start_time_ms,
                timeout_ms=description.transaction_timeout_ms,
                named_by_batch=named_by.get(tid),
            )
        )
    return tuple(result)
