"""What a refused commit of a decided batch says ended its transaction."""

from __future__ import annotations

import pytest
from kafka.admin import TransactionDescription, TransactionState

from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.sink.topics.kafka_refusals import transaction_ending, way_out


def _now(state: str, pid: int = 4001, epoch: int = 3) -> TransactionDescription:
    return TransactionDescription(1, TransactionState(state), pid, epoch, 10_000, 0, set())


@pytest.mark.parametrize(
    "two_phase, description, cause",
    [
        (False, _now("CompleteAbort", epoch=4), "the broker aborted it"),
        (True, _now("CompleteAbort", epoch=4), "a forced termination aborted it"),
        (True, _now("Empty", epoch=4), "another writer took the id"),
        (False, _now("Ongoing", pid=77, epoch=0), "another writer took the id"),
        (True, _now("CompleteAbort", epoch=6), "another writer took the id"),
        (False, _now("CompleteAbort"), "aborted by its own handle"),
        (False, None, "no longer knows the id"),
    ],
)
def test_the_cause_is_read_from_the_coordinators_description(
    two_phase: bool, description: TransactionDescription | None, cause: str
) -> None:
    prepared = PreparedTransaction("app-q1-0-0", 4001, 3, 100, two_phase_commit=two_phase)
    said = transaction_ending(prepared, description)
    assert cause in said, said
    if two_phase and "forced" in said:
        assert "timeout" in said  # says why it cannot have been the broker's timeout


def test_the_way_out_names_the_batch_and_both_choices() -> None:
    said = way_out(7)
    assert "unaligned abandon" in said and "--batch 7" in said
    assert "--replay" in said and "--skip" in said
