"""The registry client against servers that are not there: a closed port and a server that
accepts but never answers. Each fails in bounded time with a message that names the registry
without its credentials. (Answers of a real registry: integration/test_registry_formats.py.)"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from unaligned.data_source import UnalignedDataSource
from unaligned.errors import SchemaRegistryError
from unaligned.registry.connection.client import RegistryClient
from unaligned.registry.options import RegistryConfig


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_registry_that_is_down_fails_after_its_attempts_naming_it_without_credentials() -> None:
    port = closed_port()
    config = RegistryConfig(
        urls=(f"http://bob:url-secret@127.0.0.1:{port}",),
        user_info="alice:info-secret",
        attempts=2,
    )
    with pytest.raises(SchemaRegistryError) as failed:
        RegistryClient(config).subject_version("orders-value", None)
    text = str(failed.value)
    assert f"Schema Registry at http://127.0.0.1:{port} could not be reached" in text
    assert "2 round(s)" in text and "Connection refused" in text
    assert "secret" not in text and "bob" not in text


def test_a_registry_that_never_answers_times_out(silent_port: int) -> None:
    config = RegistryConfig(
        urls=(f"http://127.0.0.1:{silent_port}",),
        bearer_token="token-secret",
        request_timeout_ms=200,
        attempts=1,
    )
    with pytest.raises(SchemaRegistryError, match="timed out") as failed:
        RegistryClient(config).schema_by_id(1)
    assert "token-secret" not in str(failed.value)


def test_a_query_over_a_registry_that_is_down_fails_when_it_is_defined() -> None:
    """``DataSource.schema()`` (what ``load()`` calls) resolves the reader schema: a registry
    down at start stops the query before it runs, with the registry error."""
    source = UnalignedDataSource(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "subscribe": "orders",
            "valueFormat": "avro-confluent",
            "schema.registry.url": f"http://127.0.0.1:{closed_port()}",
            "schema.registry.basic.auth.user.info": "alice:info-secret",
        }
    )
    with pytest.raises(SchemaRegistryError, match="orders-value") as failed:
        source.schema()
    assert "info-secret" not in str(failed.value)


def test_an_outage_is_retried_until_the_request_timeout() -> None:
    import time

    config = RegistryConfig(urls=(f"http://127.0.0.1:{closed_port()}",), request_timeout_ms=800)
    began = time.monotonic()
    with pytest.raises(SchemaRegistryError, match="within schema.registry.request.timeout.ms=800"):
        RegistryClient(config).schema_by_id(3)
    assert time.monotonic() - began >= 0.8


def test_several_urls_are_tried_in_turn() -> None:
    config = RegistryConfig(
        urls=(f"http://127.0.0.1:{closed_port()}", f"http://127.0.0.1:{closed_port()}"),
        attempts=1,
    )
    with pytest.raises(SchemaRegistryError) as failed:
        RegistryClient(config).versions("s")
    assert str(failed.value).count("127.0.0.1") == 3  # both named, the last failure quoted
