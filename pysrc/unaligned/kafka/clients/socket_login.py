"""A blocking socket to one broker, logged in as the client's options say: TLS, then SASL.

:func:`open_logged_in` connects to ``host:port`` and, as kafka-python's connections do with the
same kwargs:

1. wraps the socket in TLS with the client's ``SSLContext``
   (:func:`unaligned.kafka.login.client_login.login_kwargs`: the same trusted certificates,
   client certificate and host-name check) when the protocol is ``SSL`` or ``SASL_SSL``; with
   ``SSL`` one ``ApiVersions`` v0 round trip follows (a broker refuses a client certificate only
   after the TLS 1.3 handshake, at the first read);
2. with ``SASL_*``, sends ``SaslHandshake`` v1 and the mechanism's ``SaslAuthenticate`` v1
   exchanges (the mechanism's messages come from kafka-python's own SASL mechanisms:
   :func:`unaligned.kafka.clients.client_internals.sasl_mechanism`); the broker's session lifetime
   (KIP-368, ``connections.max.reauth.ms``) says when the login ends: the caller opens a new
   socket before then (:attr:`LoggedIn.expires_at`).

A refused login (the broker's TLS alert about the client's certificate, a certificate the client
does not trust, ``SASL_AUTHENTICATION_FAILED``, an unsupported mechanism) raises
:class:`~unaligned.errors.KafkaAuthenticationError` naming the mechanism and the broker's
reason (an OAUTHBEARER token that had expired when sent: that it expired, and when), never a
secret; anything else (connection refused or lost, a timeout) raises a retriable
``KafkaConnectionError``. The read path's own connections
(:mod:`unaligned.kafka.fetch.fetch_connections`) log in here, and :func:`explain_bootstrap_failure`
uses it to say why a kafka-python client could not bootstrap.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors

from unaligned.errors import KafkaAuthenticationError
from unaligned.kafka.clients.client_internals import sasl_mechanism
from unaligned.kafka.login.client_login import login_kwargs
from unaligned.kafka.login.oauth_tokens import bearer_expiry

SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY, SASL_VERSION = 17, 36, 1
API_VERSIONS_KEY = 18
#: The share of the broker's session lifetime after which a caller logs in again.
REAUTHENTICATE_AT = 0.85
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


@dataclass
class LoggedIn:
    """A connected, logged-in socket; ``expires_at`` (``time.monotonic()``) is when to log in
    again (``None``: the broker set no session lifetime)."""

    sock: socket.socket
    expires_at: float | None


def login_summary(client_kwargs: Mapping[str, Any]) -> str:
    """How the client logs in, for messages: ``SASL_SSL SCRAM-SHA-512``, ``SSL``..."""
    protocol = str(client_kwargs.get("security_protocol", "PLAINTEXT"))
    mechanism = client_kwargs.get("sasl_mechanism") if protocol.startswith("SASL_") else None
    return f"{protocol} {mechanism}" if mechanism else protocol


def open_logged_in(
    host: str, port: int, client_kwargs: Mapping[str, Any], timeout_s: float
) -> LoggedIn:
    """Connect and log in (module docstring); raises :class:`KafkaAuthenticationError` or a
    retriable ``KafkaConnectionError``."""
    deadline = time.monotonic() + timeout_s
    kwargs = login_kwargs(client_kwargs)
    protocol = str(kwargs.get("security_protocol", "PLAINTEXT"))
    address = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise kafka_errors.KafkaConnectionError(f"connecting to {address}: {exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        summary = login_summary(client_kwargs)
        if protocol in ("SSL", "SASL_SSL"):
            sock = _tls(sock, host, address, kwargs, summary)
        exchange = _Exchange(sock, address, str(kwargs.get("client_id") or "unaligned"), deadline)
        exchange.summary = summary
        expires_at = None
        if protocol.startswith("SASL_"):
            expires_at = _sasl(exchange, host, address, kwargs)
        elif protocol == "SSL":
            exchange.ask(API_VERSIONS_KEY, 0, b"")
    except BaseException:
        sock.close()
        raise
    return LoggedIn(sock, expires_at)


def _tls(
    sock: socket.socket,
    host: str,
    address: str,
    kwargs: Mapping[str, Any],
    summary: str,
) -> socket.socket:
    context: ssl.SSLContext = kwargs["ssl_context"]
    try:
        return context.wrap_socket(sock, server_hostname=host.rstrip("."))
    except OSError as exc:
        raise _tls_failure(exc, address, summary) from None


def _tls_failure(exc: OSError, address: str, summary: str) -> Exception:
    """A TLS error in words: a refused login (:class:`KafkaAuthenticationError`) or a lost
    connection (retriable)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return KafkaAuthenticationError(
            f"TLS with {address} ({summary}): the broker's certificate is not trusted: "
            f"{exc.verify_message or exc.reason}; check kafka.ssl.truststore.* (and "
            "kafka.ssl.endpoint.identification.algorithm)"
        )
    reason = str(getattr(exc, "reason", "") or "")
    if isinstance(exc, ssl.SSLError) and ("ALERT" in reason or "CERTIFICATE" in reason):
        return KafkaAuthenticationError(
            f"TLS with {address} ({summary}): the broker refused the client ({reason}): it "
            "wants a client certificate it trusts; check kafka.ssl.keystore.*"
        )
    lost: Exception = kafka_errors.KafkaConnectionError(f"TLS with {address}: {exc}")
    return lost


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


class _Exchange:
    """Size-framed requests (header v1) and answers (header v0) on a blocking socket."""

    def __init__(self, sock: socket.socket, address: str, client_id: str, deadline: float):
        self._sock, self._address, self._client_id = sock, address, client_id
        self._deadline = deadline
        self._next_id = 0
        self.summary = ""

    def ask(self, api_key: int, version: int, body: bytes) -> memoryview:
        self._next_id += 1
        header = _I16.pack(api_key) + _I16.pack(version) + _I32.pack(self._next_id)
        frame = header + _string(self._client_id) + body
        try:
            self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))
            self._sock.sendall(_I32.pack(len(frame)) + frame)
            size = _I32.unpack(self._read(4))[0]
            answer = memoryview(self._read(size))
        except ssl.SSLError as exc:
            raise _tls_failure(exc, self._address, self.summary) from None
        except (OSError, TimeoutError) as exc:
            raise kafka_errors.KafkaConnectionError(
                f"logging in to {self._address}: {exc}"
            ) from exc
        if _I32.unpack_from(answer, 0)[0] != self._next_id:
            raise kafka_errors.KafkaConnectionError(f"{self._address} answered out of order")
        return answer[4:]

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                raise ConnectionResetError("the broker closed the connection")
            data += chunk
        return bytes(data)


def _sasl(exchange: _Exchange, host: str, address: str, kwargs: Mapping[str, Any]) -> float | None:
    name = str(kwargs.get("sasl_mechanism"))
    what = f"SASL {name} login to {address}"
    answer = exchange.ask(SASL_HANDSHAKE_KEY, SASL_VERSION, _string(name))
    error = _I16.unpack_from(answer, 0)[0]
    count = _I32.unpack_from(answer, 2)[0]
    offered, at = [], 6
    for _ in range(max(count, 0)):
        length = _I16.unpack_from(answer, at)[0]
        offered.append(bytes(answer[at + 2 : at + 2 + length]).decode())
        at += 2 + length
    if error or name not in offered:
        raise KafkaAuthenticationError(
            f"{what}: the listener does not take {name} (it offers {', '.join(offered) or 'none'})"
        )
    try:
        mechanism = sasl_mechanism(name, host, kwargs)
    except Exception as exc:  # the mechanism's own checks (a library missing, a setting)
        raise KafkaAuthenticationError(f"{what}: {type(exc).__name__}: {exc}") from None
    lifetime_ms = 0
    first: bytes | None = None
    while not mechanism.is_done():
        token = mechanism.auth_bytes()
        first = token if first is None else first
        answer = exchange.ask(SASL_AUTHENTICATE_KEY, SASL_VERSION, _I32.pack(len(token)) + token)
        error = _I16.unpack_from(answer, 0)[0]
        length = _I16.unpack_from(answer, 2)[0]
        message = bytes(answer[4 : 4 + length]).decode() if length >= 0 else ""
        at = 4 + max(length, 0)
        size = _I32.unpack_from(answer, at)[0]
        received = bytes(answer[at + 4 : at + 4 + max(size, 0)])
        lifetime_ms = _I64.unpack_from(answer, at + 4 + max(size, 0))[0]
        if error:
            reason = message or kafka_errors.for_code(error).__name__
            raise KafkaAuthenticationError(
                f"{what} was refused by the broker: {_expired(name, first) or reason}"
            )
        mechanism.receive(received)
    if not mechanism.is_authenticated():
        raise KafkaAuthenticationError(f"{what} was refused by the broker")
    if lifetime_ms <= 0:
        return None
    return time.monotonic() + lifetime_ms / 1000 * REAUTHENTICATE_AT


def _expired(mechanism: str, first: bytes | None) -> str | None:
    """For an OAUTHBEARER login, what to say of a token that had expired when it was sent (the
    broker answers ``invalid_token`` for an expired token and a forged one alike)."""
    expiry = bearer_expiry(first) if mechanism == "OAUTHBEARER" and first else None
    now = time.time()
    if expiry is None or expiry > now:
        return None
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry))
    return (
        f"the token expired at {when} ({now - expiry:.0f} s before this login, by this host's "
        "clock): the token source gave an expired token; check what it returns (and the clock)"
    )


def explain_bootstrap_failure(client_kwargs: Mapping[str, Any], timeout_s: float) -> None:
    """After a kafka-python client failed to bootstrap: log in to each bootstrap server once
    here and raise the :class:`KafkaAuthenticationError` of a refused login (kafka-python only
    says it could not bootstrap). Returns when no login was refused (the cluster was just
    unreachable)."""
    protocol = str(client_kwargs.get("security_protocol", "PLAINTEXT"))
    if protocol == "PLAINTEXT":
        return
    servers = client_kwargs.get("bootstrap_servers", ())
    for server in [servers] if isinstance(servers, str) else servers:
        host, _, port = str(server).rpartition(":")
        try:
            opened = open_logged_in(host.strip("[]"), int(port), client_kwargs, timeout_s)
        except kafka_errors.KafkaError:
            continue
        except ValueError:
            return
        opened.sock.close()
