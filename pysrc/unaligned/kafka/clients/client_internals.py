"""Every access to kafka-python's private names, in one place, each with a canary test.

kafka-python :data:`PINNED_KAFKA_PYTHON` (``setup.cfg`` pins it) gives no public way to send a
request on a client's connections, to schedule work on its I/O thread, or to read its sockets
in larger pieces; the read and the produce paths need all three. Importing this module with
another kafka-python raises :class:`~unaligned.errors.KafkaClientVersionError` naming the
supported version, so nothing below runs against names it was not checked with.

- :func:`connection_manager`: ``KafkaAdminClient._manager`` (``send``, ``run``, ``call_soon``,
  ``cluster``): the read tasks' ``Fetch`` (:mod:`unaligned.kafka.fetch.range_fetch`), the produce
  session's requests and the driver's ``EndTxn``
  (:mod:`unaligned.kafka.transactions.transaction_coordinator`);
- :func:`event_loop`: the manager's loop ``_manager._net`` (``call_soon``, ``call_later``,
  ``sleep``): the produce session's retries and back-offs;
- :func:`give_metadata_retry_backoff`: writes ``KafkaProducer._metadata.config``;
- :func:`sasl_mechanism`: ``kafka.net.sasl.get_sasl_mechanism`` and the mechanism objects'
  ``auth_bytes`` / ``receive`` / ``is_done`` / ``is_authenticated`` (kafka-python's plugin
  interface, not a documented API): the messages of the read path's own SASL logins;
- :func:`read_sockets_in_large_pieces`: replaces ``KafkaTCPTransport._sock_recv`` in read-task
  workers whose records come over kafka-python's connections (SASL on plain TCP; a plaintext
  cluster's come over :mod:`unaligned.kafka.fetch.fetch_connections`) with one that reads up to
  :data:`RECV_BYTES` per call (TLS keeps its own).

:data:`PRIVATE_ACCESSES` lists them; ``tests/kafka/clients/test_client_internals.py`` checks each
still behaves and that ARCHITECTURE.md's table of private APIs names each.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.net.connection import KafkaConnection
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.transport import KafkaTCPTransport

import kafka
from kafka import KafkaProducer
from unaligned.errors import KafkaClientVersionError

#: The kafka-python version whose internals this module uses.
PINNED_KAFKA_PYTHON = "3.0.12"
#: Bytes asked of a plain-TCP socket per ``recv`` call.
RECV_BYTES = 256 * 1024
#: Every private kafka-python name this module touches (ARCHITECTURE.md's table names each).
PRIVATE_ACCESSES = (
    "KafkaAdminClient._manager",
    "_manager._net",
    "KafkaProducer._metadata",
    "KafkaTCPTransport._sock_recv",
    "kafka.net.sasl.get_sasl_mechanism",
)
#: kafka-python's defaults of the settings its SASL mechanisms read.
_SASL_DEFAULTS = {k: v for k, v in KafkaConnection.DEFAULT_CONFIG.items() if k.startswith("sasl_")}

if kafka.__version__ != PINNED_KAFKA_PYTHON:
    raise KafkaClientVersionError(
        f"unaligned needs kafka-python {PINNED_KAFKA_PYTHON} (it uses private names checked "
        f"with that version); kafka-python {kafka.__version__} is installed: "
        f"pip install kafka-python=={PINNED_KAFKA_PYTHON}"
    )


def connection_manager(admin: KafkaAdminClient) -> Any:
    """The admin client's connection manager (``send``, ``run``, ``call_soon``, ``cluster``)."""
    return admin._manager


def event_loop(manager: Any) -> Any:
    """A connection manager's event loop (``call_soon``, ``call_later``, ``sleep``)."""
    return manager._net


def give_metadata_retry_backoff(producer: KafkaProducer) -> None:
    """kafka-python 3.0.12 builds a producer's cluster metadata without the producer's
    ``retry_backoff_ms``: a topic's partitions asked for right after bootstrap then waited the
    default 100 ms. Give it the producer's value."""
    producer._metadata.config["retry_backoff_ms"] = producer.config["retry_backoff_ms"]


def _large_recv(self: Any) -> tuple[bytes, BaseException | None]:
    """``KafkaTCPTransport._sock_recv`` with :data:`RECV_BYTES` per call: (bytes read, error)."""
    sock: socket.socket = self._sock
    chunks: list[bytes] = []
    error: BaseException | None = None
    size = RECV_BYTES
    while True:
        try:
            data = sock.recv(size)
        except (BlockingIOError, InterruptedError):
            break
        except Exception as exc:  # the transport aborts the connection with it
            error = kafka_errors.KafkaConnectionError(exc)
            break
        if not data:
            error = kafka_errors.KafkaConnectionError("socket disconnected")
            break
        chunks.append(data)
        if len(data) < size:
            break
    return b"".join(chunks), error


def read_sockets_in_large_pieces() -> None:
    """Install :func:`_large_recv` for plain-TCP connections in this process (idempotent)."""
    KafkaTCPTransport._sock_recv = _large_recv


def sasl_mechanism(name: str, host: str, config: Mapping[str, Any]) -> Any:
    """kafka-python's SASL mechanism ``name`` for a login to ``host`` with the client's
    ``config`` (``auth_bytes``, ``receive``, ``is_done``, ``is_authenticated``): the messages of
    the read path's own logins (:mod:`unaligned.kafka.clients.socket_login`)."""
    return get_sasl_mechanism(name)(host=host, **{**_SASL_DEFAULTS, **config})
