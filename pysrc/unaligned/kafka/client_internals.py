"""The private kafka-python names the read path relies on, in one place, each with a canary test.

kafka-python :data:`PINNED_KAFKA_PYTHON` (``setup.cfg`` pins it) gives no public way to send a
request on a client's connections or to read its sockets in larger pieces, and the read path
needs both:

- :func:`connection_manager`: ``KafkaAdminClient._manager``, the connection manager whose
  ``send(request, node_id)``, ``run(coroutine)`` and ``cluster`` the read tasks' ``Fetch``
  requests use (:mod:`unaligned.kafka.range_fetch`; the produce path uses the same manager);
- :func:`read_sockets_in_large_pieces`: kafka-python's plain-TCP transport reads a socket 4 KiB
  per ``recv`` call, a Python loop iteration and a list append per 4 KiB of every fetch answer
  (about 800 per 3 MB answer). This replaces ``KafkaTCPTransport._sock_recv`` in the worker
  process with one that reads up to :data:`RECV_BYTES` per call and stops at a short read (the
  socket is drained; its selector wakes the transport again). TLS connections keep their own.

``tests/kafka/test_client_internals.py`` fails when any of these change; ARCHITECTURE.md lists
them in its table of private APIs.
"""

from __future__ import annotations

import socket
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.net.transport import KafkaTCPTransport

import kafka

#: The kafka-python version whose internals this module (and the produce path) use.
PINNED_KAFKA_PYTHON = "3.0.12"
#: Bytes asked of a plain-TCP socket per ``recv`` call.
RECV_BYTES = 256 * 1024


def connection_manager(admin: KafkaAdminClient) -> Any:
    """The admin client's connection manager (``send``, ``run``, ``cluster``)."""
    return admin._manager


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
    """Install :func:`_large_recv` for plain-TCP connections in this process (idempotent; a
    kafka-python other than the pinned one is left as it is)."""
    if kafka.__version__ == PINNED_KAFKA_PYTHON:
        KafkaTCPTransport._sock_recv = _large_recv
