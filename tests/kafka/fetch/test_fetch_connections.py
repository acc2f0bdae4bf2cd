"""Which clusters the read path's own connections serve (brokers since 2.3; plaintext, TLS, and
SASL but GSSAPI and AWS_MSK_IAM), and what a connection does when it cannot connect (a
retriable error naming the broker)."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import kafka.errors as kafka_errors
import pytest

from unaligned.kafka.fetch.fetch_connections import direct_connections


@pytest.mark.parametrize(
    ("kwargs", "version", "direct"),
    [
        ({}, (4, 2), True),
        ({"security_protocol": "PLAINTEXT"}, (2, 3), True),
        ({"security_protocol": "SSL"}, (4, 2), True),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, (4, 2), True),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}, (4, 2), True),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, (4, 2), True),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, (4, 2), False),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"}, (4, 2), False),
        ({}, (2, 2), False),  # no Fetch v11 before Kafka 2.3
        ({}, None, False),  # not known yet
    ],
)
def test_own_connections_for_brokers_that_answer_v11_but_gssapi_and_iam(
    kwargs: dict[str, str], version: tuple[int, int] | None, direct: bool
) -> None:
    assert (direct_connections(kwargs, version) is not None) is direct


def test_an_unreachable_broker_is_a_retriable_connection_error_naming_it() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connections = direct_connections({"request_timeout_ms": 2000}, (4, 2))
    assert connections is not None
    with pytest.raises(kafka_errors.KafkaConnectionError, match=f"127.0.0.1:{port}") as failed:
        connections.connection(1, SimpleNamespace(host="127.0.0.1", port=port))
    assert failed.value.retriable


def test_a_broker_without_an_address_is_not_ready() -> None:
    connections = direct_connections({}, (4, 2))
    assert connections is not None
    with pytest.raises(kafka_errors.NodeNotReadyError, match="broker 3"):
        connections.connection(3, None)


def test_a_kept_connection_the_broker_closed_is_replaced_before_use() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        connections = direct_connections({"request_timeout_ms": 2000}, (4, 2))
        assert connections is not None
        broker = SimpleNamespace(host="127.0.0.1", port=port)
        first = connections.connection(7, broker)
        accepted, _ = server.accept()
        assert first.is_open()
        assert connections.connection(7, broker) is first  # kept while open
        accepted.close()  # the broker's idle timeout
        deadline = time.monotonic() + 5
        while first.is_open() and time.monotonic() < deadline:  # the FIN on its way
            time.sleep(0.01)
        assert not first.is_open()
        second = connections.connection(7, broker)
        assert second is not first
        accepted, _ = server.accept()
        accepted.close()
        connections.drop(7)
