"""A loopback OAuth 2 / OIDC issuer for tests: a JWKS endpoint and a client-credentials token
endpoint, JWTs signed by an RSA key made when it starts.

The embedded broker's ``OAUTHBEARER`` listener validates tokens with Kafka's own broker-side
validator against :attr:`OidcIssuer.jwks_url` (``sasl.oauthbearer.jwks.endpoint.url``, read when
the broker starts: the issuer must run first and for the broker's whole life), checking the
issuer (:attr:`OidcIssuer.issuer`) and the audience (:data:`AUDIENCE`). Clients ask
:attr:`OidcIssuer.token_url` for tokens as Kafka's ``sasl.oauthbearer.token.endpoint.url`` does
(RFC 6749 client credentials: ``grant_type=client_credentials``, the client id and secret in an
HTTP Basic header or in the form, an optional ``scope``); a wrong client or secret is answered
401 ``invalid_client``. :meth:`OidcIssuer.mint` signs a token directly (an expired one, say).

Tokens carry ``iss``, ``sub`` (the client id), ``aud``, ``iat``, ``exp`` (after
:attr:`OidcIssuer.lifetime_s`), ``jti`` and, when one is asked for, ``scope``;
:attr:`OidcIssuer.issued` counts the tokens the endpoint gave out. Listens on 127.0.0.1 only, in
a daemon thread, between ``__enter__`` and ``__exit__``; over HTTPS with a
:class:`~unaligned.testing.tls_material.TlsMaterial` (its server certificate, signed by the test
authority).
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from unaligned.testing.tls_material import TlsMaterial

AUDIENCE = "kafka-broker"
KEY_ID = "unaligned-test-key"
DEFAULT_LIFETIME_S = 3600


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class OidcIssuer:
    """The issuer (module docstring). ``clients``: client id -> secret it accepts; ``tls``:
    serve HTTPS with the test authority's server certificate (trusted by no system store)."""

    def __init__(
        self,
        clients: Mapping[str, str],
        lifetime_s: int = DEFAULT_LIFETIME_S,
        tls: TlsMaterial | None = None,
    ) -> None:
        self.clients = dict(clients)
        self.lifetime_s = lifetime_s
        self.tls = tls
        self.issued = 0
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- where it listens ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the OIDC issuer is not running (use it as a context manager)")
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    @property
    def issuer(self) -> str:
        """The ``iss`` claim: the base URL."""
        return self.base_url

    @property
    def jwks_url(self) -> str:
        return self.base_url + "/jwks"

    @property
    def token_url(self) -> str:
        return self.base_url + "/token"

    # --- tokens -------------------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        key = {"kty": "RSA", "kid": KEY_ID, "use": "sig", "alg": "RS256"}
        return {"keys": [{**key, "n": _uint(numbers.n), "e": _uint(numbers.e)}]}

    def mint(
        self, subject: str, *, lifetime_s: float | None = None, scope: str = "", now: float = 0.0
    ) -> str:
        """A signed JWT for ``subject`` valid from ``now`` (default: the clock) for
        ``lifetime_s`` (default :attr:`lifetime_s`; negative: already expired)."""
        issued_at = int(now or time.time())
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": AUDIENCE,
            "iat": issued_at,
            "exp": int(issued_at + (self.lifetime_s if lifetime_s is None else lifetime_s)),
            "jti": uuid.uuid4().hex,
        }
        if scope:  # Kafka's validator refuses an empty scope
            claims["scope"] = scope
        header = {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
        signing_input = (
            _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(claims).encode())
        )
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing_input + "." + _b64url(signature)

    def _token_answer(self, form: Mapping[str, str], authorization: str | None) -> tuple[int, Any]:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(authorization[6:]).decode()
            except (binascii.Error, UnicodeDecodeError):
                return 400, {"error": "invalid_request"}
            raw_id, _, raw_secret = decoded.partition(":")
            client_id, secret = urllib.parse.unquote(raw_id), urllib.parse.unquote(raw_secret)
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if client_id is None or self.clients.get(client_id) != secret:
            return 401, {"error": "invalid_client", "error_description": "unknown client"}
        with self._lock:
            self.issued += 1
        token = self.mint(client_id, scope=form.get("scope", ""))
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime_s}

    # --- the server ---------------------------------------------------------------------------

    def __enter__(self) -> OidcIssuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # quiet: tests read the answers, not the access log

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/jwks":
                    self._answer(200, issuer.jwks())
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                form = dict(urllib.parse.parse_qsl(body))
                if self.path != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(*issuer._token_answer(form, self.headers.get("Authorization")))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls.server_pem))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="oidc-issuer", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None
