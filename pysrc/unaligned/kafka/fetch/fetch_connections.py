"""The read path's own connections: one blocking socket per broker, kept per process.

A read task's ``Fetch`` answers are most of what an executor's Python worker receives. Through
kafka-python's connections each byte is copied about five times on the client's I/O thread
(socket reads, framing, response decoding; TLS in 4 KiB reads), and the task thread waits on
that thread for every answer. :class:`FetchConnection` instead sends the request
(:mod:`unaligned.kafka.fetch.fetch_wire`) on a socket of its own and reads the answer with
``recv_into`` into one buffer it keeps and grows, in the task's thread; the answer is parsed in
place. The socket logs in as kafka-python's connections would with the same options
(:func:`unaligned.kafka.clients.socket_login.open_logged_in`: TLS with the same ``SSLContext``,
SASL ``PLAIN``, ``SCRAM-*`` or ``OAUTHBEARER`` with the same messages); ``GSSAPI`` and
``AWS_MSK_IAM`` clusters stay with kafka-python's connections (:func:`direct_connections` says
which). Cluster metadata (who leads what, where a broker listens) still comes from the worker's
kept admin client.

Guarantees: a connection serves one task's round at a time (a lock, held from its first request
to its last answer); any socket error, timeout or wrong correlation id closes it and raises a
retriable ``KafkaConnectionError`` / ``RequestTimedOutError``, and the next request opens a new
one; a kept connection the broker closed meanwhile (``connections.max.idle.ms``), or whose SASL
session is near its end (KIP-368), is replaced before it is used; a connection opened in another
process (a fork) is never used. A refused login raises
:class:`~unaligned.errors.KafkaAuthenticationError` (never asked again).
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kafka_errors

from unaligned._util.process_memo import ProcessMemo
from unaligned.kafka.clients.connections import SettingsKey, settings_key
from unaligned.kafka.clients.socket_login import open_logged_in
from unaligned.kafka.fetch.fetch_wire import (
    FetchResponse,
    PartitionFetch,
    encode_fetch_request,
    parse_fetch_response,
    response_correlation_id,
)

#: The receive buffer a connection starts with; it grows to the largest answer it reads.
INITIAL_BUFFER_BYTES = 1 << 20
_SIZE = struct.Struct(">i")


class FetchConnection:
    """A blocking socket to one broker for ``Fetch`` requests (module docstring)."""

    def __init__(self, host: str, port: int, config: FetchConnectionConfig) -> None:
        self.config = config
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self._buffer = bytearray(INITIAL_BUFFER_BYTES)
        self._next_id = 0
        self._throttled_until = 0.0
        opened = open_logged_in(host, port, config.login, config.request_timeout_ms / 1000)
        self._sock = opened.sock
        self._login_ends = opened.expires_at
        if config.receive_buffer_bytes:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, config.receive_buffer_bytes)
        self.address = f"{host}:{port}"

    def close(self) -> None:
        self._sock.close()

    def is_open(self) -> bool:
        """False once the broker has closed the kept connection (its idle timeout, a restart),
        or its SASL session is near its end: between requests nothing is owed to it, so
        anything readable (a TLS alert, the end of the stream) is its end."""
        if self._login_ends is not None and time.monotonic() >= self._login_ends:
            return False
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return False
        try:
            self._sock.setblocking(False)  # the next request sets its timeout again
            # the raw socket's recv: a TLS socket takes no flags, and peeks at records anyway
            socket.socket.recv(self._sock, 1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    def request(
        self,
        topics: Sequence[tuple[str, Sequence[PartitionFetch]]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        read_committed: bool,
    ) -> int:
        """Send one request; returns its correlation id (the caller holds :attr:`lock`)."""
        pause = self._throttled_until - time.monotonic()
        if pause > 0:  # the broker asked for a pause (quota) in its last answer
            time.sleep(pause)
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        data = encode_fetch_request(
            self._next_id,
            self.config.client_id,
            topics,
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            read_committed=read_committed,
            rack_id=self.config.rack_id,
        )
        try:
            self._sock.settimeout(self.config.request_timeout_ms / 1000)
            self._sock.sendall(data)
        except OSError as exc:
            raise self._failed("sending a Fetch request", exc) from exc
        return self._next_id

    def answer(self, correlation_id: int, deadline: float) -> FetchResponse:
        """The answer to request ``correlation_id``, read by ``deadline`` (monotonic); its
        records are slices of this connection's buffer, valid until its next answer."""
        try:
            size = _SIZE.unpack(self._read(memoryview(bytearray(4)), deadline))[0]
            if size > len(self._buffer):
                self._buffer = bytearray(size)
            frame = self._read(memoryview(self._buffer)[:size], deadline)
        except (OSError, TimeoutError) as exc:
            raise self._failed("reading a Fetch answer", exc) from exc
        received = response_correlation_id(frame)
        if received != correlation_id:
            self.close()
            raise kafka_errors.KafkaConnectionError(
                f"{self.address} answered request {received}, expected {correlation_id}"
            )
        response = parse_fetch_response(frame)
        if response.throttle_time_ms > 0:
            self._throttled_until = time.monotonic() + response.throttle_time_ms / 1000
        return response

    def _read(self, target: memoryview, deadline: float) -> memoryview:
        filled = 0
        while filled < len(target):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("kafka.request.timeout.ms passed")
            self._sock.settimeout(left)
            got = self._sock.recv_into(target[filled:])
            if got == 0:
                raise ConnectionResetError("the broker closed the connection")
            filled += got
        return target

    def _failed(self, doing: str, exc: BaseException) -> kafka_errors.KafkaError:
        self.close()
        if isinstance(exc, TimeoutError):
            return kafka_errors.RequestTimedOutError(f"{doing} on {self.address}: {exc}")
        return kafka_errors.KafkaConnectionError(f"{doing} on {self.address}: {exc}")


@dataclass(frozen=True)
class FetchConnectionConfig:
    """What a connection takes from the consumer options; ``login``: the consumer kwargs it
    logs in with (:func:`unaligned.kafka.clients.socket_login.open_logged_in`)."""

    client_id: str
    request_timeout_ms: int
    receive_buffer_bytes: int | None
    rack_id: str = ""
    login: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FetchConnections:
    """The process's connections for one cluster and settings, by broker node id."""

    config: FetchConnectionConfig
    key: SettingsKey

    def connection(self, node_id: int, broker: Any) -> FetchConnection:
        """The kept connection to ``node_id`` (``broker``: its metadata, host and port), or a
        new one (raises a retriable ``KafkaConnectionError`` when it cannot connect)."""
        if broker is None:
            raise kafka_errors.NodeNotReadyError(f"no address known for broker {node_id}")
        key = (self.key, node_id)
        kept = _OPEN.get(key)
        if kept is not None and kept.pid == os.getpid():
            if kept.address == _address(broker) and kept.is_open():
                return kept
            kept.close()  # closed by the broker, or the broker listens elsewhere now
        conn = FetchConnection(broker.host, int(broker.port), self.config)
        _OPEN.put(key, conn)
        return conn

    def drop(self, node_id: int) -> None:
        """Forget (and close) the connection to ``node_id`` after a failure."""
        kept = _OPEN.get((self.key, node_id))
        _OPEN.forget((self.key, node_id))
        if kept is not None and kept.pid == os.getpid():
            kept.close()


def _address(broker: Any) -> str:
    return f"{broker.host}:{broker.port}"


_OPEN: ProcessMemo[tuple[SettingsKey, int], FetchConnection] = ProcessMemo()
"""Open connections per cluster settings and broker node id, in this worker process."""


#: The first broker version that answers ``Fetch`` v11.
DIRECT_SINCE = (2, 3)
#: SASL mechanisms the own connections log in with (the others are not tested here).
DIRECT_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"})


def direct_connections(
    consumer_kwargs: Mapping[str, Any], broker_version: tuple[int, ...] | None
) -> FetchConnections | None:
    """Own connections for a cluster whose brokers answer ``Fetch`` v11 (``broker_version``:
    what the admin client learned), in plaintext, TLS, or SASL with one of
    :data:`DIRECT_MECHANISMS`; ``None`` for ``GSSAPI`` or ``AWS_MSK_IAM``, or older brokers
    (kafka-python's connections then carry the fetches)."""
    protocol = str(consumer_kwargs.get("security_protocol", "PLAINTEXT")).upper()
    if protocol.startswith("SASL_") and consumer_kwargs.get("sasl_mechanism") not in (
        DIRECT_MECHANISMS
    ):
        return None
    if broker_version is None or tuple(broker_version[:2]) < DIRECT_SINCE:
        return None
    config = FetchConnectionConfig(
        client_id=str(consumer_kwargs.get("client_id") or "unaligned"),
        request_timeout_ms=int(consumer_kwargs.get("request_timeout_ms", 30_000)),
        receive_buffer_bytes=consumer_kwargs.get("receive_buffer_bytes"),
        rack_id=str(consumer_kwargs.get("client_rack") or ""),
        login=dict(consumer_kwargs),
    )
    return FetchConnections(config, settings_key(consumer_kwargs))
