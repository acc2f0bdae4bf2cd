"""Canaries for the private kafka-python names in unaligned.kafka.clients.client_internals: each
test fails when the pinned kafka-python changes what the read or the produce path relies on, and
one fails when ARCHITECTURE.md's table of private APIs misses an access the adapter makes."""

from __future__ import annotations

import inspect
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.cluster import ClusterMetadata
from kafka.net.manager import KafkaConnectionManager
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

import kafka
from kafka import KafkaProducer, TopicPartition
from unaligned.kafka.clients import client_internals
from unaligned.kafka.clients.client_internals import (
    PINNED_KAFKA_PYTHON,
    PRIVATE_ACCESSES,
    _large_recv,
)
from unaligned.kafka.clients.connections import build_producer

_ARCHITECTURE = Path(__file__).resolve().parents[3] / "ARCHITECTURE.md"


def test_the_installed_kafka_python_is_the_pinned_one() -> None:
    assert kafka.__version__ == PINNED_KAFKA_PYTHON


def test_another_kafka_python_is_refused_at_import_naming_the_supported_one() -> None:
    code = (
        "import kafka; kafka.__version__ = '0.0.1'\n"
        "try:\n"
        "    import unaligned.kafka.clients.client_internals\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("KafkaClientVersionError")
    assert f"kafka-python {PINNED_KAFKA_PYTHON}" in out and "0.0.1 is installed" in out


def test_architectures_table_names_every_private_access_the_adapter_makes() -> None:
    text = _ARCHITECTURE.read_text()
    table = text[text.index("## Private APIs the project pins") :]
    table = table[: table.index("\n## ", 1)]
    for access in PRIVATE_ACCESSES:
        assert f"`{access}`" in table or access in table, f"ARCHITECTURE.md misses {access}"
    # ... and the adapter touches nothing private that the tuple leaves out
    source = Path(client_internals.__file__).read_text()
    body = source[source.index("def connection_manager") :]
    touched = set(re.findall(r"\b(?:admin|manager|consumer|producer)\.(_[a-z_]+)", body))
    listed = {access.rsplit(".", 1)[1] for access in PRIVATE_ACCESSES}
    assert touched <= listed, touched - listed


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


def test_the_connection_manager_and_its_loop_have_what_the_produce_path_calls() -> None:
    for name in ("run", "call_soon", "send"):
        assert callable(getattr(KafkaConnectionManager, name)), name
    for name in ("call_soon", "call_later", "sleep"):
        assert callable(getattr(NetworkSelector, name)), name
    assert "_net" in inspect.getsource(KafkaConnectionManager.__init__)
    for name in ("get_coordinator", "add_coordinator", "update_metadata"):
        assert callable(getattr(ClusterMetadata, name)), name


def test_the_cluster_metadata_keeps_leaders_leader_epochs_and_topic_ids() -> None:
    """What the offset look-ups, the read tasks and the truncation checks read of
    ``connection_manager(admin).cluster`` (leaders and epochs from MetadataResponse v9+)."""
    cluster = ClusterMetadata()
    unknown = TopicPartition("nothing", 0)
    assert cluster.leader_for_partition(unknown) is None
    assert cluster.leader_epoch_for_partition(unknown) is None
    assert cluster.topic_id("nothing") is None
    assert callable(cluster.broker_metadata)


def test_build_producer_gives_the_metadata_the_producers_retry_backoff() -> None:
    # kafka-python 3.0.12 leaves its ClusterMetadata at the default 100 ms, which every task
    # paid waiting for its topic's partitions right after bootstrap. With api_version given the
    # producer does not connect, so no broker is needed here. Fails once upstream passes it.
    kwargs = {"bootstrap_servers": "127.0.0.1:1", "api_version": (4, 0), "retry_backoff_ms": 7}
    plain = KafkaProducer(**kwargs)
    built = build_producer(kwargs)
    try:
        assert plain._metadata.config["retry_backoff_ms"] == 100  # the upstream gap
        assert built._metadata.config["retry_backoff_ms"] == 7
    finally:
        plain.close(timeout=0)
        built.close(timeout=0)


def test_sasl_mechanisms_give_the_messages_the_own_logins_send() -> None:
    """kafka.net.sasl's mechanisms, as unaligned.kafka.clients.socket_login drives them: the
    first message, what the broker's answer does, when the exchange is done."""
    plain = client_internals.sasl_mechanism(
        "PLAIN",
        "broker",
        {
            "security_protocol": "SASL_SSL",
            "sasl_plain_username": "u",
            "sasl_plain_password": "p",
        },
    )
    assert plain.auth_bytes() == b"u\x00u\x00p" and not plain.is_done()
    plain.receive(b"")
    assert plain.is_done() and plain.is_authenticated()
    scram = client_internals.sasl_mechanism(
        "SCRAM-SHA-512",
        "broker",
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "u",
            "sasl_plain_password": "p",
        },
    )
    assert scram.auth_bytes().startswith(b"n,,n=u,r=") and not scram.is_done()

    class Tokens(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return "tok"

        def extensions(self) -> dict[str, str]:
            return {"logicalCluster": "lkc-1"}

    oauth = client_internals.sasl_mechanism(
        "OAUTHBEARER", "broker", {"sasl_oauth_token_provider": Tokens()}
    )
    assert oauth.auth_bytes() == b"n,,\x01auth=Bearer tok\x01logicalCluster=lkc-1\x01\x01"
    oauth.receive(b"")
    assert oauth.is_done() and oauth.is_authenticated()
