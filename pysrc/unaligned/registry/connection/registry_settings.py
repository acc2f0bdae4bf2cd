"""Where the Schema Registry is and how to log in: the ``schema.registry.*`` options (Confluent's
client names) parsed into a picklable :class:`RegistryConfig` whose ``repr`` and messages never
show a secret.

Basic auth (``basic.auth.user.info``, or ``user:password@`` in the URL), a static bearer token
(``bearer.auth.token``), or OAuth client credentials (``bearer.auth.credentials.source`` =
``OAUTHBEARER`` with ``bearer.auth.issuer.endpoint.url``, ``bearer.auth.client.id``,
``bearer.auth.client.secret``, optional ``bearer.auth.scope``; Confluent Cloud's
``bearer.auth.logical.cluster`` and ``bearer.auth.identity.pool.id`` become its headers); TLS
with a CA file and an optional client certificate (PEM); ``request.timeout.ms``, the bound on
each request and on the retries of a registry that cannot be reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from unaligned.errors import OptionError
from unaligned.options.parsing import parse_choice, parse_duration_ms
from unaligned.registry.option_specs import REGISTRY_PREFIX, REGISTRY_SETTINGS

REDACTED = "<redacted>"


@dataclass(frozen=True)
class OAuthClient:
    """OAuth 2 client credentials: the registry's bearer token is asked of ``token_url``
    (``grant_type=client_credentials``, the client's id and secret as HTTP basic auth)."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None


@dataclass(frozen=True)
class RegistryConfig:
    """Where the registry is and how to log in. Picklable (it travels to the read and write
    tasks); its ``repr`` shows no credentials."""

    urls: tuple[str, ...] = field(repr=False)  # may hold user:password@
    user_info: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    request_timeout_ms: int = 10_000
    attempts: int | None = None
    """Rounds over the URLs at most (``None``: until ``request_timeout_ms`` has passed)."""
    oauth: OAuthClient | None = None
    logical_cluster: str | None = None
    identity_pool_id: str | None = None

    def __repr__(self) -> str:
        return f"RegistryConfig(urls={self.shown_urls()!r})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret of this configuration: never in a message."""
        found = [self.user_info, self.bearer_token, self.key_password]
        if self.oauth is not None:
            found.append(self.oauth.client_secret)
        if self.user_info and ":" in self.user_info:
            found.append(self.user_info.split(":", 1)[1])
        for url in self.urls:
            parts = urlsplit(url)
            found += [parts.password, parts.username and parts.password and parts.netloc]
        return tuple(s for s in found if s)

    def redact(self, text: str) -> str:
        """``text`` with every secret of this configuration replaced."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    def shown_urls(self) -> str:
        """The registry URLs as messages name them (no user or password)."""
        return ", ".join(_url_without_user(url) for url in self.urls)


def _url_without_user(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return parts._replace(netloc=host).geturl()


_REGISTRY_SETTINGS = REGISTRY_SETTINGS


def parse_registry(given: Mapping[str, str]) -> RegistryConfig:
    settings: dict[str, str] = {}
    for key, raw in given.items():
        if not key.startswith(REGISTRY_PREFIX):
            continue
        name = key[len(REGISTRY_PREFIX) :]
        if name not in _REGISTRY_SETTINGS:
            raise OptionError(
                f"unknown option 'schema.registry.{name}'; known: "
                + ", ".join(sorted(_REGISTRY_SETTINGS.values()))
            )
        settings[name] = raw
    urls = tuple(u.strip().rstrip("/") for u in settings.get("url", "").split(",") if u.strip())
    if not urls:
        raise OptionError(
            "a Schema Registry format needs option 'schema.registry.url' (e.g. "
            "http://registry:8081; several, comma-separated, are tried in turn)"
        )
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OptionError(
                "option 'schema.registry.url' must be http(s)://host[:port][/path], got "
                f"{_url_without_user(url)!r}"
            )
    for source_key, wanted in (
        ("basic.auth.credentials.source", ("user_info", "url")),
        ("bearer.auth.credentials.source", ("static_token", "oauthbearer")),
    ):
        if source_key in settings:
            parse_choice(f"schema.registry.{source_key}", settings[source_key], wanted)
    oauth = _oauth(settings)
    user_info = settings.get("basic.auth.user.info")
    if user_info is not None and ":" not in user_info:
        raise OptionError(
            "option 'schema.registry.basic.auth.user.info' must be 'user:password' "
            "(value not shown)"
        )
    token = settings.get("bearer.auth.token")
    if sum(x is not None for x in (user_info, token, oauth)) > 1:
        raise OptionError(
            "options 'schema.registry.basic.auth.user.info', "
            "'schema.registry.bearer.auth.token' and OAuth client credentials "
            "('schema.registry.bearer.auth.credentials.source' OAUTHBEARER): give one way to "
            "log in"
        )
    cert = settings.get("ssl.certificate.location")
    key_file = settings.get("ssl.key.location")
    if key_file is not None and cert is None:
        raise OptionError(
            "option 'schema.registry.ssl.key.location' needs "
            "'schema.registry.ssl.certificate.location' (the client certificate)"
        )
    timeout = settings.get("request.timeout.ms")
    return RegistryConfig(
        urls=urls,
        user_info=user_info,
        bearer_token=token,
        ca_location=settings.get("ssl.ca.location"),
        certificate_location=cert,
        key_location=key_file,
        key_password=settings.get("ssl.key.password"),
        oauth=oauth,
        logical_cluster=settings.get("bearer.auth.logical.cluster"),
        identity_pool_id=settings.get("bearer.auth.identity.pool.id"),
        request_timeout_ms=(
            10_000
            if timeout is None
            else parse_duration_ms("schema.registry.request.timeout.ms", timeout, minimum=1)
        ),
    )


def _oauth(settings: Mapping[str, str]) -> OAuthClient | None:
    source = settings.get("bearer.auth.credentials.source", "").strip().lower()
    names = (
        "bearer.auth.issuer.endpoint.url",
        "bearer.auth.client.id",
        "bearer.auth.client.secret",
    )
    if source != "oauthbearer":
        given = [n for n in (*names, "bearer.auth.scope") if n in settings]
        if given:
            raise OptionError(
                f"option 'schema.registry.{given[0]}' needs "
                "'schema.registry.bearer.auth.credentials.source' set to OAUTHBEARER"
            )
        return None
    missing = [f"schema.registry.{n}" for n in names if not settings.get(n, "").strip()]
    if missing:
        raise OptionError(
            "'schema.registry.bearer.auth.credentials.source' OAUTHBEARER needs option(s) "
            + ", ".join(missing)
        )
    url = settings[names[0]].strip()
    if urlsplit(url).scheme not in ("http", "https"):
        raise OptionError(
            f"option 'schema.registry.{names[0]}' must be an http(s) URL, got "
            f"{_url_without_user(url)!r}"
        )
    scope = settings.get("bearer.auth.scope")
    return OAuthClient(url, settings[names[1]].strip(), settings[names[2]], scope or None)
