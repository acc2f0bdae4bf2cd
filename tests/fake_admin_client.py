"""A stand-in for kafka-python's ``KafkaAdminClient`` behind the process's kept admin clients
(:mod:`unaligned.kafka.clients.admin_clients`): :func:`use_fake_admin` puts :class:`FakeAdmin`
in its place with no kept client yet, and every client built is in ``FakeAdmin.built``. It
sends no request. Shared by the tests of the kept clients and of the sink's warm-up."""

from __future__ import annotations

import pytest
from kafka.admin import KafkaAdminClient

from unaligned._util.process_memo import ProcessMemo
from unaligned.kafka.clients import admin_clients


class FakeAdmin:
    DEFAULT_CONFIG = KafkaAdminClient.DEFAULT_CONFIG
    built: list[FakeAdmin] = []

    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        self.closed = False
        FakeAdmin.built.append(self)

    def close(self) -> None:
        self.closed = True


def use_fake_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    """:class:`FakeAdmin` for the test, with no kept client and nothing built yet."""
    monkeypatch.setattr(admin_clients, "KafkaAdminClient", FakeAdmin)
    monkeypatch.setattr(admin_clients, "_KEPT", ProcessMemo())
    monkeypatch.setattr(FakeAdmin, "built", [])
