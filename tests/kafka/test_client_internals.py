"""Canaries for the private kafka-python names in unaligned.kafka.client_internals: each test
fails when the pinned kafka-python changes what the read path relies on."""

from __future__ import annotations

import inspect
import socket
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.net.manager import KafkaConnectionManager
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

import kafka
from unaligned.kafka import client_internals
from unaligned.kafka.client_internals import PINNED_KAFKA_PYTHON, _large_recv


def test_the_installed_kafka_python_is_the_pinned_one() -> None:
    assert kafka.__version__ == PINNED_KAFKA_PYTHON


def test_the_admin_client_keeps_a_connection_manager_with_send_run_and_cluster() -> None:
    assert "self._manager = self._client._manager" in inspect.getsource(KafkaAdminClient.__init__)
    assert list(inspect.signature(KafkaConnectionManager.send).parameters) == [
        "self",
        "request",
        "node_id",
        "request_timeout_ms",
    ]
    assert callable(KafkaConnectionManager.run)
    assert "cluster" in inspect.getsource(KafkaConnectionManager.__init__)


def test_the_tcp_transport_reads_through_sock_recv_returning_data_and_error() -> None:
    read_loop = inspect.getsource(KafkaTCPTransport._read_from_sock)
    assert "recvd_data, err = self._sock_recv()" in read_loop
    original = inspect.getsource(KafkaTCPTransport._sock_recv)
    # ours is installed only in worker processes that read; here the class may hold either
    assert "recv(4096)" in original or KafkaTCPTransport._sock_recv is _large_recv
    # TLS keeps its own reads, which the replacement must not touch
    assert "_sock_recv" in KafkaSSLTransport.__dict__


class _Holder:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock


def test_large_reads_return_everything_available_then_stop(monkeypatch: Any) -> None:
    monkeypatch.setattr(client_internals, "RECV_BYTES", 1000)  # several reads for 2,500 bytes
    left, right = socket.socketpair()
    try:
        right.setblocking(False)
        payload = bytes(range(250)) * 10
        left.sendall(payload)
        data, error = _large_recv(_Holder(right))
        assert error is None and data == payload
        data, error = _large_recv(_Holder(right))  # nothing more yet
        assert (data, error) == (b"", None)
        left.close()
        data, error = _large_recv(_Holder(right))
        assert data == b"" and isinstance(error, kafka_errors.KafkaConnectionError)
    finally:
        right.close()


def test_installing_the_large_reads_changes_plain_tcp_only(monkeypatch: Any) -> None:
    monkeypatch.setattr(KafkaTCPTransport, "_sock_recv", KafkaTCPTransport._sock_recv)
    ssl_recv = KafkaSSLTransport._sock_recv
    client_internals.read_sockets_in_large_pieces()
    assert KafkaTCPTransport._sock_recv is _large_recv
    assert KafkaSSLTransport._sock_recv is ssl_recv
