"""The transactional-id pool's lanes: no two live attempts of a task can try the same slot."""

from __future__ import annotations

from typing import Any

import pytest

from unaligned.kafka.transactions import transaction_states
from unaligned.sink.topics import kafka_id_pool
from unaligned.sink.topics.kafka_id_pool import free_id, lane, slot


def test_a_query_without_failures_uses_slot_0_and_1_by_batch_parity() -> None:
    assert [slot(lane(batch, 0), 0) for batch in range(4)] == [0, 1, 0, 1]


def test_lanes_of_attempts_that_may_live_at_once_never_share_a_slot() -> None:
    """Attempts 0-5 of a batch and of the next one: every slot of every lane is its own."""
    owner: dict[int, tuple[int, int]] = {}
    for batch in (6, 7):
        for attempt in range(6):
            for k in range(40):
                taken = owner.setdefault(slot(lane(batch, attempt), k), (batch, attempt))
                assert taken == (batch, attempt), (batch, attempt, k)
    assert len(owner) == 2 * 6 * 40


def test_an_open_slot_is_skipped_along_the_attempts_own_lane(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attempt 0's first slot is open (a dead attempt's, or named by a record): it moves to the
    next slot of lane 0 (2), never to slot 1, the first of the next batch's lane."""
    open_ids = {"p-3-0"}
    asked: list[str] = []

    def describe(kwargs: Any, ids: list[str]) -> dict[str, Any]:
        asked.extend(ids)
        return {tid: tid for tid in ids}

    monkeypatch.setattr(transaction_states, "describe_transactions", describe)
    monkeypatch.setattr(transaction_states, "is_open", lambda d: d in open_ids)
    assert free_id({}, lambda s: f"p-3-{s}", lane(0, 0)) == "p-3-2"
    assert asked == ["p-3-0", "p-3-2"]
    assert kafka_id_pool.id_pattern("p").fullmatch("p-3-2")
