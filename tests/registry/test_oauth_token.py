"""OAuth client credentials to the registry: the token is asked of the issuer once and sent as
a bearer token with Confluent Cloud's headers; a refused client names the endpoint, never the
secret; the options need each other."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from unaligned.errors import OAuthTokenError, OptionError
from unaligned.registry.connection.client import RegistryClient
from unaligned.registry.options import parse_formats

SECRET = "client-secret-9f"


class _Server:
    def __init__(self) -> None:
        self.token_requests: list[tuple[str, str]] = []
        self.registry_headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the token endpoint
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                outer.token_requests.append((self.headers["Authorization"], body))
                ok = (
                    self.headers["Authorization"]
                    == "Basic " + base64.b64encode(f"spark:{SECRET}".encode()).decode()
                )
                answer = {"access_token": "tok-1", "expires_in": 300} if ok else {"error": "no"}
                self._send(200 if ok else 401, answer)

            def do_GET(self) -> None:  # noqa: N802 - the registry
                outer.registry_headers.append({k.lower(): v for k, v in self.headers.items()})
                self._send(200, {"schema": '"long"', "id": 4})

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    served = _Server()
    yield served
    served.http.shutdown()


def _client(server: _Server, client_id: str = "spark") -> RegistryClient:
    formats = parse_formats(
        {
            "valueformat": "avro-confluent",
            "schema.registry.url": server.url,
            "schema.registry.bearer.auth.credentials.source": "OAUTHBEARER",
            "schema.registry.bearer.auth.issuer.endpoint.url": server.url + "/token",
            "schema.registry.bearer.auth.client.id": client_id,
            "schema.registry.bearer.auth.client.secret": SECRET,
            "schema.registry.bearer.auth.scope": "registry",
            "schema.registry.bearer.auth.logical.cluster": "lsrc-1",
            "schema.registry.bearer.auth.identity.pool.id": "pool-2",
        },
        sink=False,
    )
    assert formats is not None and SECRET not in repr(formats.registry)
    return RegistryClient(formats.registry)


def test_the_token_is_asked_once_and_sent_with_cloud_headers(server: _Server) -> None:
    client = _client(server)
    assert client.schema_by_id(4).text == '"long"'
    client.schema_by_id(4)
    assert len(server.token_requests) == 1
    assert server.token_requests[0][1] == "grant_type=client_credentials&scope=registry"
    for headers in server.registry_headers:
        assert headers["authorization"] == "Bearer tok-1"
        assert headers["target-sr-cluster"] == "lsrc-1"
        assert headers["confluent-identity-pool-id"] == "pool-2"


def test_a_refused_client_names_the_endpoint_never_the_secret(server: _Server) -> None:
    with pytest.raises(OAuthTokenError, match="refused client 'other'") as refused:
        _client(server, "other").schema_by_id(4)
    assert SECRET not in str(refused.value)


def test_the_oauth_options_need_each_other() -> None:
    base = {"valueformat": "avro-confluent", "schema.registry.url": "http://r:8081"}
    with pytest.raises(OptionError, match="needs option.*client.secret"):
        parse_formats(
            {
                **base,
                "schema.registry.bearer.auth.credentials.source": "OAUTHBEARER",
                "schema.registry.bearer.auth.issuer.endpoint.url": "http://idp/token",
                "schema.registry.bearer.auth.client.id": "x",
            },
            sink=False,
        )
    with pytest.raises(OptionError, match="needs 'schema.registry.bearer.auth.credentials"):
        parse_formats({**base, "schema.registry.bearer.auth.client.id": "x"}, sink=False)
