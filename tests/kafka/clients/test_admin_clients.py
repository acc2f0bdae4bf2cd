"""Admin clients: the kept per-process client is lent to one block at a time, dropped after a
failure, and never used across a fork (the broker side is covered by the sink's integration
tests, whose every task asks DescribeTransactions through it)."""

from __future__ import annotations

import os
import threading

import pytest

from fake_admin_client import FakeAdmin, use_fake_admin
from unaligned.kafka.clients.admin_clients import (
    admin_client_kwargs,
    shared_admin_client,
    warm_admin_client,
)


@pytest.fixture(autouse=True)
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_admin(monkeypatch)


KWARGS = {"bootstrap_servers": ["b:9092"], "transactional_id": "t", "acks": "all"}


def test_admin_kwargs_drop_producer_only_options() -> None:
    kwargs = {
        "bootstrap_servers": "127.0.0.1:1",
        "client_id": "c",
        "request_timeout_ms": 5000,
        "transaction_timeout_ms": 60000,
        "acks": "all",
        "linger_ms": 5,
        "security_protocol": "PLAINTEXT",
    }
    assert admin_client_kwargs(kwargs) == {
        "bootstrap_servers": "127.0.0.1:1",
        "client_id": "c",
        "request_timeout_ms": 5000,
        "security_protocol": "PLAINTEXT",
    }


def test_one_client_is_kept_per_process_and_settings() -> None:
    with shared_admin_client(KWARGS) as first:
        pass
    with shared_admin_client({**KWARGS, "transactional_id": "other"}) as again:
        pass  # producer-only settings do not make another client
    with shared_admin_client({**KWARGS, "bootstrap_servers": ["c:9092"]}) as elsewhere:
        pass
    assert again is first and elsewhere is not first
    assert len(FakeAdmin.built) == 2 and not any(a.closed for a in FakeAdmin.built)


def test_a_client_lent_to_one_block_is_not_lent_to_another() -> None:
    inner: list[object] = []
    with shared_admin_client(KWARGS) as outer:
        worker = threading.Thread(
            target=lambda: inner.append(shared_admin_client(KWARGS).__enter__())
        )
        worker.start()
        worker.join()
        with shared_admin_client(KWARGS) as nested:
            assert nested is not outer
        assert isinstance(nested, FakeAdmin) and nested.closed  # the block's own, closed after
    assert inner and inner[0] is not outer
    with shared_admin_client(KWARGS) as later:
        assert later is outer  # given back


def test_a_block_that_raises_drops_the_client() -> None:
    with pytest.raises(ConnectionError), shared_admin_client(KWARGS) as broken:
        raise ConnectionError("broker away")
    assert isinstance(broken, FakeAdmin) and broken.closed
    with shared_admin_client(KWARGS) as fresh:
        assert fresh is not broken and not fresh.closed


def test_a_client_built_before_a_fork_is_not_used_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with shared_admin_client(KWARGS) as parent:
        pass
    monkeypatch.setattr(os, "getpid", lambda: -1)
    with shared_admin_client(KWARGS) as child:
        assert child is not parent
    assert not parent.closed  # its I/O thread is the parent's: not touched from the child


def test_a_client_with_another_in_flight_bound_is_kept_apart() -> None:
    with shared_admin_client(KWARGS) as default:
        pass
    with shared_admin_client(KWARGS, max_in_flight=17) as wide:
        pass
    with shared_admin_client(KWARGS, max_in_flight=17) as again:
        pass
    assert wide is not default and again is wide
    assert isinstance(wide, FakeAdmin)
    assert wide.kwargs["max_in_flight_requests_per_connection"] == 17
    assert "max_in_flight_requests_per_connection" not in default.kwargs  # type: ignore[attr-defined]


def test_a_warmed_client_is_the_one_the_next_block_is_lent() -> None:
    warm_admin_client(KWARGS)
    warm_admin_client(KWARGS)  # warm already: nothing built
    assert len(FakeAdmin.built) == 1
    with shared_admin_client(KWARGS) as lent:
        assert lent is FakeAdmin.built[0] and not lent.closed
    warm_admin_client(KWARGS, max_in_flight=17)
    with shared_admin_client(KWARGS, max_in_flight=17) as wide:
        assert wide is FakeAdmin.built[1]
    assert len(FakeAdmin.built) == 2


def test_warming_a_client_lent_to_a_block_builds_none_and_takes_nothing() -> None:
    with shared_admin_client(KWARGS) as outer:
        warm_admin_client(KWARGS)
        assert FakeAdmin.built == [outer]
    with shared_admin_client(KWARGS) as later:
        assert later is outer  # warming did not keep it lent
