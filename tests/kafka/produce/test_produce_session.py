"""Unit tests for unaligned.kafka.produce.produce_session: no broker (the session against a real
broker is integration/test_produce_session.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from unaligned.errors import OptionError, TransactionWriteError
from unaligned.kafka.produce import produce_session
from unaligned.kafka.produce.produce_requests import CONNECTION_IN_FLIGHT, MAX_IN_FLIGHT_PER_NODE
from unaligned.kafka.produce.produce_session import ProduceSession
from unaligned.kafka.produce.producer_modes import InTransaction


class _Unreachable(Exception):
    pass


def test_sessions_borrow_a_kept_client_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Produce sessions borrow the kept client with one more request in flight than they
    produce with; the task's DescribeTransactions uses the default one, which a broker quota
    never pauses."""
    asked: list[dict[str, Any]] = []

    @contextmanager
    def lend(kwargs: dict[str, Any], *, max_in_flight: int | None = None) -> Iterator[Any]:
        asked.append({"kwargs": kwargs, "max_in_flight": max_in_flight})
        raise _Unreachable
        yield

    monkeypatch.setattr(produce_session, "shared_admin_client", lend)
    with pytest.raises(_Unreachable):
        ProduceSession({"bootstrap_servers": "b:1"}, InTransaction("t-0-0")).begin()
    assert asked == [
        {"kwargs": {"bootstrap_servers": "b:1"}, "max_in_flight": CONNECTION_IN_FLIGHT}
    ]
    assert CONNECTION_IN_FLIGHT == MAX_IN_FLIGHT_PER_NODE + 1


def test_a_session_refuses_work_out_of_order() -> None:
    with pytest.raises(OptionError, match="non-empty transactional id"):
        ProduceSession({}, InTransaction(""))
    session = ProduceSession({"bootstrap_servers": "b:1"}, InTransaction("t-0-0"))
    with pytest.raises(TransactionWriteError, match="cannot send transaction 't-0-0'.*new"):
        session.send_batch("x", 0, b"", 1, 1)
    with pytest.raises(
        TransactionWriteError, match="cannot flush transaction .t-0-0.: the session is new"
    ):
        session.prepare()
    session.abort()  # nothing began: nothing to abort
    session.close()
    with pytest.raises(TransactionWriteError, match="closed"):
        session.begin()
