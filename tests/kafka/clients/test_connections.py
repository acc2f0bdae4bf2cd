"""Producers built from sink kwargs: a cluster nobody answers for fails in bounded time, naming
the bootstrap servers; the package's own settings never reach kafka-python."""

from __future__ import annotations

import socket
import time

import pytest

from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_options import API_TIMEOUT_KWARG
from unaligned.kafka.clients.connections import build_producer, describe_servers, settings_key
from unaligned.kafka.login.tls_stores import ClientIdentity, InlinePem, TlsSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_cluster_fails_the_producer_naming_the_servers_in_bounded_time() -> None:
    servers = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError, match=servers):
        build_producer(
            {
                "bootstrap_servers": [servers],
                "bootstrap_timeout_ms": 1500,
                API_TIMEOUT_KWARG: 1500,  # the package's own: taken out before kafka-python
            }
        )
    assert time.monotonic() - started < 15


def test_settings_keys_and_server_names() -> None:
    assert settings_key({"b": 1, "a": [2], "c": {"x": 1}}) == (
        ("a", (2,)),
        ("b", 1),
        ("c", "{'x': 1}"),
    )
    # settings whose repr hides a secret still tell two secrets apart
    first = TlsSettings(identity=ClientIdentity(InlinePem("o", "k"), key_password="one"))
    second = TlsSettings(identity=ClientIdentity(InlinePem("o", "k"), key_password="two"))
    assert repr(first) == repr(second)
    assert settings_key({"tls": first}) != settings_key({"tls": second})
    assert describe_servers({"bootstrap_servers": ["h1:1", "h2:2"]}) == "h1:1,h2:2"
    assert describe_servers({"bootstrap_servers": "h:1"}) == "h:1"
