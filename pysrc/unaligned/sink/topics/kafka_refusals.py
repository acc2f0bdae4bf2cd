"""What ended a decided batch's transaction that its coordinator refuses to commit, in words.

A transaction named by a commit record can only be refused (``PRODUCER_FENCED``,
``INVALID_TXN_STATE``, ``INVALID_PRODUCER_ID_MAPPING``) once something else ended it. The
coordinator's description of the id, asked after the refusal, tells which
(:func:`transaction_ending`):

- the id's producer epoch one above the prepared one, aborting or aborted: the broker's
  transaction timeout (only without two-phase commit) or a forced termination by an operator
  (``kafka-transactions forceTerminateTransaction``);
- another producer id or a later epoch: another writer took the id with ``InitProducerId``;
  with the pool's stems (:mod:`unaligned.sink.topics.kafka_id_pool`) no other query of this
  project does, so it is a copy of this checkpoint run as a second query, a producer configured
  with this id, or a tool;
- an id the coordinator no longer knows: ``transactional.id.expiration.ms`` passed.

:func:`way_out` names what the operator can do: ``unaligned abandon`` (:mod:`unaligned.cli`).
"""

from __future__ import annotations

from kafka.admin import TransactionDescription, TransactionState

from unaligned.kafka.transactions.transactions import PreparedTransaction

_ABORTING = frozenset({TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT})
_COMMITTING = frozenset({TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT})


def transaction_ending(
    prepared: PreparedTransaction, description: TransactionDescription | None
) -> str:
    """What ended ``prepared`` as its coordinator now describes its id (module docstring)."""
    if description is None:
        return (
            "its coordinator no longer knows the id (transactional.id.expiration.ms passed "
            "with no use of it)"
        )
    now = (
        f"the coordinator has the id {description.state.value} under producer id "
        f"{description.producer_id}, epoch {description.producer_epoch}"
    )
    same_producer = description.producer_id == prepared.producer_id
    if same_producer and description.producer_epoch == prepared.epoch:
        if description.state in _COMMITTING:
            return f"{now}: it was committed"
        if description.state in _ABORTING:
            return f"{now}: it was aborted by its own handle (an abort, or unaligned abandon)"
        return f"{now}: it is still open"
    if (
        same_producer
        and description.producer_epoch == prepared.epoch + 1
        and description.state in _ABORTING
    ):
        if prepared.two_phase_commit:
            return (
                f"{now}: a forced termination aborted it (kafka-transactions "
                "forceTerminateTransaction, or an admin client's forceTerminateTransaction); "
                "with two-phase commit the broker never aborts it on its timeout"
            )
        return (
            f"{now}: the broker aborted it when kafka.transaction.timeout.ms "
            f"({description.transaction_timeout_ms} ms) passed before the commit (the restart "
            "came later than that), or a forced termination did"
        )
    return (
        f"{now}: another writer took the id (InitProducerId) and so fenced and aborted it: a "
        "copy of this checkpoint run as a second query, a producer configured with this "
        "transactional id, or a tool"
    )


def way_out(batch_id: int) -> str:
    """The operator's choices for a decided batch whose transactions cannot all commit."""
    return (
        f"To go on, end batch {batch_id} with 'unaligned abandon <checkpointLocation> --batch "
        f"{batch_id}' and '--replay' (Spark writes the batch again: exactly once while none of "
        "its transactions was committed) or '--skip' (its records are given up); the "
        "operations guide has what each choice costs"
    )
