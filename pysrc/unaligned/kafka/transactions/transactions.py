"""A task's Kafka transaction as the driver sees it: prepared on an executor, ended elsewhere.

A sink task writes its records into a transaction (:class:`unaligned.kafka.produce.produce_session.
ProduceSession`), *prepares* it (every record acknowledged, the transaction still open) and
hands the :class:`PreparedTransaction` to the driver, which commits or aborts it later in another
OS process (:func:`unaligned.kafka.transactions.transaction_coordinator.commit_prepared`, which also
explains how a transaction is ended without ``init_transactions`` and the stale-EndTxn hazard).
:class:`WriterState` is where a task's session is. ARCHITECTURE.md ("The two-phase commit") has
the protocol.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
    two_phase_commit: bool = False
    """Opened with two-phase commit (KIP-939): the broker never aborts it on its timeout."""

    def describe(self) -> str:
        return (
            f"transactional id {self.transactional_id!r} "
            f"(producer id {self.producer_id}, epoch {self.epoch})"
        )


class WriterState(enum.Enum):
    """Where a task's transaction is
    (:class:`unaligned.kafka.produce.produce_session.ProduceSession`)."""

    NEW = "new"
    OPEN = "open"
    PREPARED = "prepared"
    ABORTED = "aborted"
    CLOSED = "closed"
