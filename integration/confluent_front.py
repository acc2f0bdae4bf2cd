"""The test kit's registry as Confluent's clients expect it: a pass-through front to Apicurio
Registry that answers ``?format=serialized`` for Protobuf as Confluent's API documents it.

Why: Confluent's Protobuf deserializer (and its serializer with ``use.latest.version``) asks for
writer schemas with ``format=serialized`` and expects the base64 of a ``FileDescriptorProto``.
Apicurio Registry 3.3.3 answers it wrongly both ways (checked against the test kit's server):

- a schema registered as ``.proto`` text (what our sink, Confluent's Java serializer and
  Confluent's registry keep) comes back as the descriptor's *raw bytes* in the JSON string, so
  every byte above 0x7f is lost and Confluent's client fails (``UnicodeEncodeError`` in
  ``_str_to_proto``);
- a schema registered as base64 (what Confluent's Python serializer sends) fails with HTTP 500
  ("Syntax error ... unexpected label").

Our sink's registration is Confluent's documented form; the registry's answer is the one at
fault. This front forwards every request unchanged except those GETs: it asks Apicurio for the
schema as stored and answers the base64 descriptor (compiled from the text with its
references, or the stored base64 as it is). Everything else (ids, subjects, versions,
registration, basic auth) is Apicurio's own answer.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from unaligned.registry.connection.client import RegistryClient, _schema
from unaligned.registry.connection.schemas import ResolvedSchema
from unaligned.registry.options import parse_formats
from unaligned.registry.protobuf.protobuf_schema import compiled, is_serialized
from unaligned.testing.registry_server import RegistryServer


class ConfluentFront:
    """A front on a loopback port for ``registry`` (module docstring)."""

    def __init__(self, registry: RegistryServer) -> None:
        self._registry = registry
        options = {k.lower(): v for k, v in registry.options().items()}
        formats = parse_formats({"valueformat": "protobuf-confluent", **options}, sink=False)
        assert formats is not None
        self._client = RegistryClient(formats.registry)
        front = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                front._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                front._handle(self, "POST")

            def do_DELETE(self) -> None:  # noqa: N802
                front._handle(self, "DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.serialized_answers = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def options(self) -> dict[str, str]:
        """Our source's and sink's options for this front."""
        return {**self._registry.options(), "schema.registry.url": self.url}

    def confluent_conf(self) -> dict[str, str]:
        """Confluent's ``SchemaRegistryClient`` configuration for this front."""
        options = self._registry.options()
        return {
            "url": self.url,
            "basic.auth.user.info": options["schema.registry.basic.auth.user.info"],
        }

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ConfluentFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- forwarding -------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = dict(parse_qsl(parts.query))
        if method == "GET" and query.get("format") == "serialized":
            del query["format"]
            rest = f"?{urlencode(query)}" if query else ""
            status, body = self._forward("GET", parts.path + rest, handler, None)
            if status == 200:
                body = self._serialized(json.loads(body))
            self._answer(handler, status, body)
            return
        length = int(handler.headers.get("Content-Length") or 0)
        data = handler.rfile.read(length) if length else None
        self._answer(handler, *self._forward(method, handler.path, handler, data))

    def _forward(
        self, method: str, path: str, handler: BaseHTTPRequestHandler, data: bytes | None
    ) -> tuple[int, bytes]:
        headers = {
            k: v for k, v in handler.headers.items() if k.lower() not in ("host", "accept-encoding")
        }
        request = urllib.request.Request(
            self._registry.url + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _serialized(self, body: dict[str, Any]) -> bytes:
        if str(body.get("schemaType", "AVRO")).upper() == "PROTOBUF":
            text = str(body["schema"])
            if not is_serialized(text):
                schema = _schema({**body, "id": body.get("id", 0)})
                resolved = ResolvedSchema(schema, self._client.referenced(schema))
                proto = compiled(resolved).file_proto
                body["schema"] = base64.b64encode(proto.SerializeToString()).decode("ascii")
            self.serialized_answers += 1
        return json.dumps(body).encode()

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
