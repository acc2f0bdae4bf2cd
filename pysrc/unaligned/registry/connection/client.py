"""The Schema Registry's REST API (Confluent's, which Confluent Schema Registry, Apicurio's
``/apis/ccompat/v7``, Redpanda and Karapace serve), over the standard library's HTTP client.

:class:`RegistryClient` asks for a schema by id (and the subjects that hold it) or by GUID, a
subject's version (or its latest), whether a schema is registered under a subject, and
registers one.
Basic auth (``user:password``), a bearer token or an OAuth client's token
(:mod:`unaligned.registry.connection.oauth_token`) go in the ``Authorization`` header; TLS takes a
CA file and an optional client certificate (PEM). A connection error, a timeout or a 5xx answer is
tried again on the next URL, round after round with a pause doubling up to 1 s, until
``schema.registry.request.timeout.ms`` has passed since the request began (each attempt gets
what is left of it): a registry that is down fails the caller (the driver's start, a read or
write task) within that bound, as Kafka's clients fail within theirs. Every message names the
registry by its URL without credentials and runs through :meth:`RegistryConfig.redact`.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from unaligned.errors import SchemaNotFoundError, SchemaRegistryError
from unaligned.registry.connection.oauth_token import TokenKeeper
from unaligned.registry.connection.registry_settings import RegistryConfig

logger = logging.getLogger(__name__)

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_FIRST_PAUSE_S = 0.1
_MAX_PAUSE_S = 1.0
#: Confluent's error codes for "no such subject / version / schema".
_NOT_FOUND_CODES = {40401, 40402, 40403}


@dataclass(frozen=True)
class Reference:
    """A schema reference: the name the schema imports (a Protobuf file, an Avro type, a JSON
    Schema ``$ref``) and the subject and version that hold it."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: ``schema_type`` is ``AVRO``, ``JSON`` or
    ``PROTOBUF``; ``text`` the schema itself."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()
    subject: str | None = None
    version: int | None = None


def _references(raw: Any) -> tuple[Reference, ...]:
    return tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in raw or ())


def _schema(body: Any, schema_id: int | None = None) -> RegisteredSchema:
    return RegisteredSchema(
        schema_id=int(body["id"] if schema_id is None else schema_id),
        schema_type=str(body.get("schemaType") or "AVRO").upper(),
        text=str(body["schema"]),
        references=_references(body.get("references")),
        subject=body.get("subject"),
        version=body.get("version"),
    )


class RegistryClient:
    """One registry configuration's requests (module docstring). Thread-safe, no state but the
    TLS context."""

    def __init__(self, config: RegistryConfig) -> None:
        self._config = config
        self._ssl = self._ssl_context()
        self._tokens = None if config.oauth is None else TokenKeeper(config.oauth, self._ssl)

    @property
    def config(self) -> RegistryConfig:
        return self._config

    # --- the API ---------------------------------------------------------------------------

    def schema_by_id(self, schema_id: int, subject: str | None = None) -> RegisteredSchema:
        path = f"/schemas/ids/{schema_id}"
        if subject is not None:
            path += f"?subject={quote(subject, safe='')}"
        try:
            return _schema(self._request("GET", path), schema_id)
        except SchemaNotFoundError:
            raise self._not_found(f"has no schema with id {schema_id}") from None

    def schema_by_guid(self, guid: str) -> tuple[RegisteredSchema, int | None]:
        """The schema of ``guid`` (Confluent Schema Registry 8.0+: ``GET /schemas/guids/{guid}``)
        and its numeric id when the answer gives one. Raises :class:`SchemaNotFoundError` for a
        GUID the registry does not hold, and :class:`SchemaRegistryError` naming the way out
        when the registry serves no GUIDs."""
        path = f"/schemas/guids/{quote(guid, safe='')}"
        try:
            body = self._request("GET", path)
        except SchemaNotFoundError:
            raise self._not_found(f"has no schema with GUID {guid}") from None
        except SchemaRegistryError as exc:
            if "HTTP 404" not in str(exc) and "HTTP 405" not in str(exc):
                raise
            raise self._error(
                f"does not serve schema GUIDs (GET {path} answered {_status(str(exc))}), and a "
                "record names its schema by GUID in its schema id header: GUIDs need Confluent "
                "Schema Registry 8.0 or newer (or a registry that serves GET /schemas/guids)"
            ) from None
        schema_id = body.get("id")
        return _schema(body, -1 if schema_id is None else int(schema_id)), (
            None if schema_id is None else int(schema_id)
        )

    def subjects_of(self, schema_id: int) -> list[str]:
        """The subjects a schema id is registered under (empty when the registry has none)."""
        try:
            return [str(s) for s in self._request("GET", f"/schemas/ids/{schema_id}/subjects")]
        except SchemaNotFoundError:
            return []

    def subject_version(self, subject: str, version: int | None) -> RegisteredSchema:
        """``subject`` at ``version`` (``None``: its latest version)."""
        shown = "latest" if version is None else str(version)
        try:
            return _schema(self._request("GET", f"/subjects/{_quoted(subject)}/versions/{shown}"))
        except SchemaNotFoundError:
            which = "no version" if version is None else f"no version {version}"
            raise self._not_found(f"has {which} of subject {subject!r}") from None

    def versions(self, subject: str) -> list[int]:
        """The versions registered under ``subject`` (empty when there is none)."""
        try:
            return [int(v) for v in self._request("GET", f"/subjects/{_quoted(subject)}/versions")]
        except SchemaNotFoundError:
            return []

    def lookup(
        self, subject: str, text: str, schema_type: str, references: tuple[Reference, ...] = ()
    ) -> RegisteredSchema | None:
        """The registration of ``text`` under ``subject``; ``None`` when it is not registered."""
        try:
            body = self._request(
                "POST", f"/subjects/{_quoted(subject)}", _payload(text, schema_type, references)
            )
        except SchemaNotFoundError:
            return None
        return _schema(body)

    def register(
        self, subject: str, text: str, schema_type: str, references: tuple[Reference, ...] = ()
    ) -> int:
        """Register ``text`` under ``subject`` (the registry returns the existing id when it is
        there already); its id."""
        body = self._request(
            "POST",
            f"/subjects/{_quoted(subject)}/versions",
            _payload(text, schema_type, references),
        )
        return int(body["id"])

    def referenced(self, schema: RegisteredSchema) -> tuple[tuple[str, RegisteredSchema], ...]:
        """Every schema ``schema`` references, directly or not, as (the name it is imported
        as, the schema), each after the schemas it references itself."""
        found: dict[str, RegisteredSchema] = {}

        def visit(refs: tuple[Reference, ...], depth: int) -> None:
            for ref in refs:
                if ref.name in found:
                    continue
                if depth > 32:
                    raise self._error(f"references nest deeper than 32 at {ref.name!r}")
                held = self.subject_version(ref.subject, ref.version)
                visit(held.references, depth + 1)
                found[ref.name] = held

        visit(schema.references, 0)
        return tuple(found.items())

    # --- HTTP ------------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext | None:
        config = self._config
        if not any(urlsplit(u).scheme == "https" for u in config.urls):
            return None
        try:
            context = ssl.create_default_context(cafile=config.ca_location)
            if config.certificate_location is not None:
                context.load_cert_chain(
                    config.certificate_location, config.key_location, config.key_password
                )
        except (OSError, ssl.SSLError) as exc:
            raise SchemaRegistryError(
                config.redact(
                    f"cannot set up TLS for the Schema Registry at {config.shown_urls()}: {exc} "
                    "(options schema.registry.ssl.ca.location, .certificate.location, "
                    ".key.location: PEM files)"
                )
            ) from None
        return context

    def _headers(self, url: str, timeout_s: float) -> dict[str, str]:
        headers = {"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE}
        config = self._config
        parts = urlsplit(url)
        user_info = config.user_info
        if user_info is None and parts.username is not None:
            user_info = f"{parts.username}:{parts.password or ''}"
        if user_info is not None:
            token = base64.b64encode(user_info.encode()).decode("ascii")
            headers["Authorization"] = f"Basic {token}"
        elif self._tokens is not None:
            headers["Authorization"] = f"Bearer {self._tokens.token(timeout_s)}"
        elif config.bearer_token is not None:
            headers["Authorization"] = f"Bearer {config.bearer_token}"
        if config.logical_cluster is not None:
            headers["target-sr-cluster"] = config.logical_cluster
        if config.identity_pool_id is not None:
            headers["Confluent-Identity-Pool-Id"] = config.identity_pool_id
        return headers

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        config = self._config
        data = None if body is None else json.dumps(body).encode("utf-8")
        last = "no answer"
        deadline = time.monotonic() + config.request_timeout_ms / 1000
        pause, rounds = _FIRST_PAUSE_S, 0
        while True:
            for url in config.urls:
                left = deadline - time.monotonic()
                try:
                    return self._attempt(method, url, path, data, max(left, 0.05))
                except urllib.error.HTTPError as exc:
                    text = _error_text(exc)
                    if exc.code == 404 and _error_code(text) in _NOT_FOUND_CODES:
                        raise SchemaNotFoundError(config.redact(text)) from None
                    if exc.code == 401 and self._tokens is not None:
                        self._tokens.forget()
                    if exc.code < 500:
                        raise self._refused(method, path, exc.code, text) from None
                    last = f"HTTP {exc.code} from {_shown(url)}: {text}"
                except (OSError, ValueError) as exc:  # refused, reset, timed out, TLS, bad JSON
                    last = f"{type(exc).__name__} from {_shown(url)}: {exc}"
                logger.info("Schema Registry request failed: %s", config.redact(last))
            rounds += 1
            left = deadline - time.monotonic()
            if left <= 0 or (config.attempts is not None and rounds >= config.attempts):
                break
            time.sleep(min(pause, left))
            pause = min(pause * 2, _MAX_PAUSE_S)
        raise self._error(
            f"could not be reached for {method} {path} within "
            f"schema.registry.request.timeout.ms={config.request_timeout_ms} ({rounds} round(s) "
            f"over {len(config.urls)} URL(s); last: {last})"
        )

    def _attempt(
        self, method: str, url: str, path: str, data: bytes | None, timeout_s: float
    ) -> Any:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        target = parts._replace(netloc=host).geturl() + path
        request = urllib.request.Request(
            target, data=data, method=method, headers=self._headers(url, timeout_s)
        )
        with urllib.request.urlopen(request, timeout=timeout_s, context=self._ssl) as answer:
            raw = answer.read()
        return json.loads(raw) if raw else None

    def _refused(self, method: str, path: str, code: int, text: str) -> SchemaRegistryError:
        hint = ""
        if code == 404:
            hint = (
                " (is schema.registry.url the API's base, e.g. http://host:8081 or "
                ".../apis/ccompat/v7?)"
            )
        elif code in (401, 403):
            hint = (
                " (check schema.registry.basic.auth.user.info, schema.registry.bearer.auth.token "
                "or the OAuth client's options)"
            )
        return self._error(f"refused {method} {path}: HTTP {code} {text}{hint}")

    def _not_found(self, what: str) -> SchemaNotFoundError:
        config = self._config
        return SchemaNotFoundError(
            config.redact(f"Schema Registry at {config.shown_urls()} {what}")
        )

    def _error(self, what: str) -> SchemaRegistryError:
        config = self._config
        return SchemaRegistryError(
            config.redact(f"Schema Registry at {config.shown_urls()} {what}")
        )


def _shown(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _status(text: str) -> str:
    return "HTTP 404" if "HTTP 404" in text else "HTTP 405"


def _quoted(subject: str) -> str:
    return quote(subject, safe="")


def _payload(text: str, schema_type: str, references: tuple[Reference, ...]) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    if references:
        body["references"] = [
            {"name": r.name, "subject": r.subject, "version": r.version} for r in references
        ]
    return body


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", "replace")[:500]
    except OSError:
        return exc.reason if isinstance(exc.reason, str) else ""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.strip()
    if isinstance(body, dict) and "message" in body:
        code = body.get("error_code")
        return f"{body['message']}" + (f" (error_code {code})" if code is not None else "")
    return raw.strip()


def _error_code(text: str) -> int | None:
    marker = "(error_code "
    if marker not in text:
        return None
    try:
        return int(text.rsplit(marker, 1)[1].rstrip(")"))
    except ValueError:
        return None
