"""OAUTHBEARER tokens for kafka-python: fetched, kept and refreshed before they expire, per process.

kafka-python asks its ``sasl_oauth_token_provider`` for a token whenever a connection logs in
(and logs in again, KIP-368). What the options say a token comes from is a :class:`TokenSource`
(picklable; parsed by :mod:`unaligned.kafka.clients.security_options`):

- :class:`ClientCredentials`: OIDC client credentials as Kafka's KIP-768 login callback handler
  asks them: ``POST`` to ``sasl.oauthbearer.token.endpoint.url`` with
  ``grant_type=client_credentials`` (and ``scope``), the client id and secret URL-encoded in an
  HTTP Basic header; the answer's ``access_token`` is the token. An ``https`` endpoint is
  trusted by the ``ssl.truststore.*`` (and ``ssl.keystore.*``) options of the JAAS entry, as
  Java's handler does, else by the system's authorities. A ``file:`` URL names a file
  holding the token instead, read again at each refresh.
- :class:`UserProvider`: the user's own provider, named by an import string
  (``package.module:attribute``); the attribute is called without arguments in each process
  and returns an object with ``token()`` (and optionally ``extensions()``).

The providers kafka-python calls are :mod:`unaligned.kafka.login.token_providers`' (this
module imports no kafka-python: option parsing uses it). A kept token is fetched again once it
is past its refresh point (Java's rule: ``sasl.login.refresh.window.factor`` of its lifetime, but
at least ``sasl.login.refresh.buffer.seconds`` before it expires and ``sasl.login.refresh.min
.period.seconds`` after it was issued, unless its lifetime is shorter than both); a refresh that
fails while the kept token is still valid keeps it (logged). The expiry is the JWT's ``exp``
claim, else the answer's ``expires_in``. Endpoint failures (connection, 5xx, 429) are asked
again with a backoff doubling from ``sasl.login.retry.backoff.ms`` to ``...max.ms``. Errors name
the endpoint and the client id, never the secret or a token. :func:`bearer_expiry` reads the
expiry of the token a login sent, so that a refused login can say the token had expired.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unaligned.errors import OAuthTokenError, OptionError
from unaligned.kafka.login.tls_stores import TlsSettings, tls_context

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefreshRule:
    """Java's ``sasl.login.refresh.*`` settings: when a kept token is fetched again."""

    window_factor: float = 0.8
    buffer_s: int = 300
    min_period_s: int = 60

    def refresh_at(self, issued_at: float, expires_at: float) -> float:
        """When a token issued at ``issued_at`` that expires at ``expires_at`` is refreshed."""
        lifetime = expires_at - issued_at
        at = issued_at + lifetime * self.window_factor
        if self.buffer_s + self.min_period_s <= lifetime:
            at = min(at, expires_at - self.buffer_s)
            at = max(at, issued_at + self.min_period_s)
        return at


@dataclass(frozen=True)
class ClientCredentials:
    """A token endpoint's client credentials grant (or a ``file:`` URL holding a token)."""

    token_endpoint_url: str
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scope: str | None = None
    extensions: tuple[tuple[str, str], ...] = ()
    refresh: RefreshRule = RefreshRule()
    connect_timeout_ms: int = 10_000
    read_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10_000
    tls: TlsSettings | None = None
    """The token endpoint's TLS: the ``ssl.*`` options of the OAuth JAAS entry, as Java's
    login callback handler takes them (``None``: the system's authorities)."""


@dataclass(frozen=True)
class UserProvider:
    """The user's own token provider, ``package.module:attribute`` (a class or a factory)."""

    import_string: str
    extensions: tuple[tuple[str, str], ...] = ()


TokenSource = ClientCredentials | UserProvider


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    issued_at: float
    expires_at: float


def load_attribute(import_string: str, option: str) -> Callable[[], Any]:
    """The callable ``import_string`` names (``package.module:attribute`` or
    ``package.module.attribute``); :class:`OptionError` naming ``option`` if it cannot be
    imported."""
    module_name, colon, attribute = import_string.partition(":")
    if not colon:
        module_name, _, attribute = import_string.rpartition(".")
    if not module_name or not attribute:
        raise OptionError(
            f"option '{option}' must name a token provider as 'package.module:attribute', got "
            f"{import_string!r}"
        )
    try:
        module = importlib.import_module(module_name)
        found = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise OptionError(
            f"option '{option}': cannot import {import_string!r} ({exc}); the module must be "
            "importable in every Python process of the query (driver and executors)"
        ) from None
    if not callable(found):
        raise OptionError(f"option '{option}': {import_string!r} is not callable")
    return found  # type: ignore[no-any-return]


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), ``None`` if it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, (int, float)) else None


def bearer_expiry(initial_response: bytes) -> float | None:
    """The expiry of the token in an OAUTHBEARER initial client response (RFC 7628:
    ``n,,\x01auth=Bearer <token>\x01...``), ``None`` if it holds no JWT with an ``exp``."""
    for part in initial_response.split(b"\x01"):
        if part.startswith(b"auth=Bearer "):
            return jwt_expiry(part[len(b"auth=Bearer ") :].decode(errors="replace").strip())
    return None


def client_credentials_fetch(source: ClientCredentials) -> Callable[[], Token]:
    url = source.token_endpoint_url
    parsed = urllib.parse.urlparse(url)
    who = f"client {source.client_id!r} at {url}"

    def from_file() -> Token:
        try:
            with open(urllib.request.url2pathname(parsed.path), encoding="utf-8") as f:
                value = f.read().strip()
        except OSError as exc:
            raise OAuthTokenError(f"cannot read the OAuth token file {url}: {exc}") from None
        return _token(value, None, f"the token file {url}")

    def from_endpoint() -> Token:
        body = {"grant_type": "client_credentials"}
        if source.scope:
            body["scope"] = source.scope
        basic = (
            urllib.parse.quote(source.client_id or "", safe="")
            + ":"
            + urllib.parse.quote(source.client_secret or "", safe="")
        )
        request = urllib.request.Request(
            url,
            data=urllib.parse.urlencode(body).encode(),
            headers={
                "Authorization": "Basic " + base64.b64encode(basic.encode()).decode(),
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        timeout_s = (source.connect_timeout_ms + source.read_timeout_ms) / 1000
        backoff_s = source.retry_backoff_ms / 1000
        context = None if source.tls is None else tls_context(source.tls)
        while True:
            try:
                with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
                    reply = json.loads(answer.read())
                break
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if exc.code not in (429,) and exc.code < 500:
                    raise OAuthTokenError(
                        f"the OAuth token endpoint refused {who}: HTTP {exc.code} {detail}"
                    ) from None
                failure = f"HTTP {exc.code} {detail}"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                failure = repr(getattr(exc, "reason", exc))
            if backoff_s * 1000 > source.retry_backoff_max_ms:
                raise OAuthTokenError(f"no OAuth token for {who}: {failure}")
            logger.info("OAuth token endpoint: %s; asking again in %.2f s", failure, backoff_s)
            time.sleep(backoff_s)
            backoff_s *= 2
        value = reply.get("access_token") if isinstance(reply, dict) else None
        if not isinstance(value, str) or not value:
            raise OAuthTokenError(f"the OAuth token endpoint gave {who} no access_token")
        return _token(value, reply.get("expires_in"), f"the token for {who}")

    return from_file if parsed.scheme == "file" else from_endpoint


def _error_detail(error: urllib.error.HTTPError) -> str:
    """The ``error`` (and description) of an OAuth error answer; never the request."""
    try:
        body = json.loads(error.read() or b"{}")
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    return " ".join(str(body[k]) for k in ("error", "error_description") if k in body)


def _token(value: str, expires_in: Any, what: str) -> Token:
    now = time.time()
    expires_at = jwt_expiry(value)
    if expires_at is None and isinstance(expires_in, (int, float)):
        expires_at = now + float(expires_in)
    if expires_at is None:
        raise OAuthTokenError(f"{what} says no expiry (neither a JWT 'exp' nor 'expires_in')")
    return Token(value, now, expires_at)
