"""What differs between a transactional and an idempotent produce session: the transactional
id the requests carry, the batches' attribute, what prepare describes, what a failure ends."""

from __future__ import annotations

from unaligned.kafka.produce.producer_modes import Idempotent, InTransaction, WrittenRecords
from unaligned.kafka.transactions.transactions import PreparedTransaction


def test_in_a_transaction() -> None:
    mode = InTransaction("q-1-0")
    assert mode.transactional_id == "q-1-0" and mode.transactional_batches
    assert mode.describe() == "transaction 'q-1-0'"
    assert mode.written((5, 2), 10, True) == PreparedTransaction("q-1-0", 5, 2, 10, True)


def test_idempotent_only() -> None:
    mode = Idempotent()
    assert mode.transactional_id is None and not mode.transactional_batches
    assert mode.describe() == "the idempotent producer"
    assert mode.written((5, 0), 10, False) == WrittenRecords(5, 0, 10)
    mode.abandon({}, (5, 0), 10)  # nothing to end: touches no broker
