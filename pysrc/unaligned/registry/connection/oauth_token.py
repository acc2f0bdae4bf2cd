"""The registry's bearer token from OAuth 2 client credentials (Confluent Cloud's
``bearer.auth.credentials.source=OAUTHBEARER``), kept per process and asked again before it
expires.

:class:`TokenKeeper` posts ``grant_type=client_credentials`` (and ``scope`` when given) to the
issuer's token endpoint with the client's id and secret as HTTP basic auth (RFC 6749 4.4) and
keeps the ``access_token`` until 80 % of its ``expires_in`` has passed (an hour when the answer
gives none). A refused request raises :class:`~unaligned.errors.OAuthTokenError` naming the
endpoint and the answer, never the secret; an endpoint that cannot be reached raises
:class:`~unaligned.errors.SchemaRegistryError`, which the client retries as any outage.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from unaligned.errors import OAuthTokenError, SchemaRegistryError
from unaligned.registry.connection.registry_settings import OAuthClient

#: The share of a token's lifetime after which a new one is asked for.
REFRESH_AT = 0.8


class TokenKeeper:
    """One OAuth client's current token (module docstring). Thread-safe."""

    def __init__(self, client: OAuthClient, context: ssl.SSLContext | None) -> None:
        self._client = client
        self._context = context
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at = 0.0

    def token(self, timeout_s: float) -> str:
        with self._lock:
            if self._token is None or time.monotonic() >= self._renew_at:
                self._token, lifetime = self._fetch(timeout_s)
                self._renew_at = time.monotonic() + REFRESH_AT * lifetime
            return self._token

    def forget(self) -> None:
        """Drop the token (the registry refused it): the next request asks for a new one."""
        with self._lock:
            self._token = None

    def _fetch(self, timeout_s: float) -> tuple[str, float]:
        client = self._client
        form = {"grant_type": "client_credentials"}
        if client.scope:
            form["scope"] = client.scope
        basic = base64.b64encode(
            f"{urllib.parse.quote(client.client_id)}:{urllib.parse.quote(client.client_secret)}".encode()
        ).decode("ascii")
        request = urllib.request.Request(
            client.token_url,
            data=urllib.parse.urlencode(form).encode(),
            method="POST",
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
        )
        context = self._context if client.token_url.startswith("https") else None
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")[:300].replace(client.client_secret, "")
            raise OAuthTokenError(
                f"the OAuth token endpoint {client.token_url} refused client "
                f"{client.client_id!r}: HTTP {exc.code} {text.strip()} (check "
                "schema.registry.bearer.auth.client.id, .client.secret and .scope)"
            ) from None
        except (OSError, ValueError) as exc:
            raise SchemaRegistryError(
                f"the OAuth token endpoint {client.token_url} could not be reached: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise OAuthTokenError(
                f"the OAuth token endpoint {client.token_url} answered without an access_token"
            )
        lifetime = body.get("expires_in")
        return token, float(lifetime) if isinstance(lifetime, (int, float)) else 3600.0
