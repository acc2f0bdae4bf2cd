"""The Schema Registry options of the source and the sink, parsed into frozen dataclasses.

Keys arrive lower-cased. The registry's own settings carry Confluent's client names under
``schema.registry.`` (``schema.registry.url``, ``schema.registry.basic.auth.user.info``,
``schema.registry.bearer.auth.token``, ``schema.registry.ssl.ca.location``, ...); a column's
format and schema are ``valueFormat`` / ``keyFormat``, ``valueSubject``, ``valueSchemaVersion``
and ``valueSchemaId`` (``key...`` alike); ``mode`` is ``FAILFAST`` or ``PERMISSIVE`` as for
Spark's ``from_avro``; the sink adds ``valueSubjectNameStrategy`` and ``autoRegisterSchemas``.
:func:`parse_formats` takes the keys it knows out of the options and returns the rest for the
caller's own checks. Nothing here touches the network: the reader schema is resolved when the
query starts (:mod:`unaligned.registry.resolution`). Every option's name, default and meaning
is declared in :mod:`unaligned.registry.option_specs`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from unaligned.errors import OptionError
from unaligned.options.parsing import parse_bool, parse_choice, parse_duration_ms, parse_positive
from unaligned.registry.option_specs import (
    COLUMN_SUFFIXES,
    REGISTRY_PREFIX,
    REGISTRY_SETTINGS,
    REGISTRY_SINK_SPECS,
    REGISTRY_SOURCE_SPECS,
    SINK_ONLY_SUFFIXES,
)

#: Declared defaults by lower-cased key (``valueformat``: ``binary``, ...).
_DEFAULTS: dict[str, str] = {
    s.key: s.default
    for s in (*REGISTRY_SOURCE_SPECS, *REGISTRY_SINK_SPECS)
    if s.default is not None
}
REDACTED = "<redacted>"


class Format(enum.Enum):
    """How a column's bytes are framed and encoded (option ``valueFormat`` / ``keyFormat``)."""

    BINARY = "binary"
    AVRO = "avro-confluent"
    JSON_SCHEMA = "json-schema-confluent"
    PROTOBUF = "protobuf-confluent"

    @property
    def schema_type(self) -> str:
        """The registry's ``schemaType`` of this format."""
        return {"avro-confluent": "AVRO", "json-schema-confluent": "JSON"}.get(
            self.value, "PROTOBUF"
        )


class DecodeMode(enum.Enum):
    """What a record that does not decode does (option ``mode``, as Spark's ``from_avro``)."""

    FAILFAST = "failfast"
    PERMISSIVE = "permissive"


class SubjectNameStrategy(enum.Enum):
    """Which subject the sink registers and looks its schema up under (Confluent's names:
    ``TopicNameStrategy``, ``RecordNameStrategy``, ``TopicRecordNameStrategy``)."""

    TOPIC = "topic"
    RECORD = "record"
    TOPIC_RECORD = "topic-record"

    def subject(self, topic: str, record_name: str, column: str) -> str:
        if self is SubjectNameStrategy.TOPIC:
            return f"{topic}-{column}"
        if self is SubjectNameStrategy.RECORD:
            return record_name
        return f"{topic}-{record_name}"


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
    attempts: int = 3

    def __repr__(self) -> str:
        return f"RegistryConfig(urls={self.shown_urls()!r})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret of this configuration: never in a message."""
        found = [self.user_info, self.bearer_token, self.key_password]
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


@dataclass(frozen=True)
class SchemaChoice:
    """Which registered schema a column is read or written with: ``schema_id``, else
    ``subject`` (``None``: the naming strategy's) at ``version`` (``None``: the latest when
    the query starts). The sink derives the schema from the column's type unless an id or a
    version (``latest`` too: ``pinned``) is given."""

    subject: str | None = None
    version: int | None = None
    schema_id: int | None = None
    pinned: bool = False
    """An id or a version was given (the sink writes with that registered schema)."""


@dataclass(frozen=True)
class ColumnFormat:
    """The format of the ``key`` or ``value`` column and the schema it is read or written with."""

    column: str  # "key" or "value"
    format: Format
    choice: SchemaChoice
    strategy: SubjectNameStrategy = SubjectNameStrategy.TOPIC
    record_name: str = "topLevelRecord"
    """The sink's name for a schema it derives (Avro record, Protobuf message, JSON Schema
    title); Spark's ``to_avro`` calls it ``topLevelRecord``."""


@dataclass(frozen=True)
class RecordFormats:
    """The formats of a query's key and value columns (``None``: binary, as without a registry)."""

    registry: RegistryConfig
    value: ColumnFormat | None
    key: ColumnFormat | None
    mode: DecodeMode = DecodeMode.FAILFAST
    auto_register: bool = True

    @property
    def columns(self) -> tuple[ColumnFormat, ...]:
        return tuple(c for c in (self.key, self.value) if c is not None)


def is_format_option(key: str, *, sink: bool) -> bool:
    """Whether this module reads the (lower-cased) option ``key``."""
    if key.startswith(REGISTRY_PREFIX) or key == "mode":
        return True
    if sink and key == "autoregisterschemas":
        return True
    for column in ("key", "value"):
        if key.startswith(column) and key[len(column) :] in COLUMN_SUFFIXES:
            return sink or key[len(column) :] not in SINK_ONLY_SUFFIXES
    return False


def parse_formats(options: Mapping[str, str], *, sink: bool) -> RecordFormats | None:
    """The formats the (lower-cased) ``options`` set; ``None`` when both columns stay binary
    and no other format option is given. Raises :class:`OptionError` naming the option."""
    given = {k: v for k, v in options.items() if is_format_option(k, sink=sink)}
    columns = {name: _column(given, name, sink) for name in ("key", "value")}
    if all(c is None for c in columns.values()):
        if given:
            named = ", ".join(sorted(given))
            raise OptionError(
                f"option(s) {named} set but neither 'valueFormat' nor 'keyFormat' names a "
                "Schema Registry format (avro-confluent, json-schema-confluent, "
                "protobuf-confluent)"
            )
        return None
    mode = DecodeMode(
        parse_choice("mode", given.get("mode", _DEFAULTS["mode"]), [m.value for m in DecodeMode])
    )
    if sink and "mode" in given:
        raise OptionError("option 'mode' applies to the source (how records that fail to decode)")
    auto = parse_bool(
        "autoRegisterSchemas", given.get("autoregisterschemas", _DEFAULTS["autoregisterschemas"])
    )
    return RecordFormats(
        registry=_registry(given),
        value=columns["value"],
        key=columns["key"],
        mode=mode,
        auto_register=auto,
    )


def _column(given: Mapping[str, str], column: str, sink: bool) -> ColumnFormat | None:
    raw = given.get(f"{column}format", _DEFAULTS[f"{column}format"])
    fmt = Format(parse_choice(f"{column}Format", raw, [f.value for f in Format]))
    if fmt is Format.BINARY:
        extra = [k for k in given if k.startswith(column) and k != f"{column}format"]
        if extra:
            spelled = column + COLUMN_SUFFIXES.get(extra[0][len(column) :], extra[0][len(column) :])
            raise OptionError(
                f"option '{spelled}' needs option '{column}Format' set to a registry format"
            )
        return None
    subject = given.get(f"{column}subject")
    if subject is not None and not subject.strip():
        raise OptionError(f"option '{column}Subject' is empty")
    version_raw = given.get(f"{column}schemaversion")
    version = None
    if version_raw is not None and version_raw.strip().lower() != "latest":
        version = parse_positive(f"{column}SchemaVersion", version_raw)
    id_raw = given.get(f"{column}schemaid")
    schema_id = None if id_raw is None else parse_positive(f"{column}SchemaId", id_raw)
    if schema_id is not None and (subject is not None or version_raw is not None):
        raise OptionError(
            f"option '{column}SchemaId' names the schema itself: leave out '{column}Subject' "
            f"and '{column}SchemaVersion'"
        )
    strategy = SubjectNameStrategy(
        parse_choice(
            f"{column}SubjectNameStrategy",
            given.get(f"{column}subjectnamestrategy", _DEFAULTS[f"{column}subjectnamestrategy"]),
            [s.value for s in SubjectNameStrategy],
        )
    )
    choice = SchemaChoice(
        subject.strip() if subject else None,
        version,
        schema_id,
        pinned=schema_id is not None or version_raw is not None,
    )
    if (
        sink
        and version_raw is not None
        and choice.subject is None
        and strategy is not (SubjectNameStrategy.TOPIC)
    ):
        raise OptionError(
            f"option '{column}SchemaVersion' with a {strategy.value} naming strategy needs "
            f"option '{column}Subject'"
        )
    name = given.get(f"{column}recordname", _DEFAULTS[f"{column}recordname"]).strip()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
        raise OptionError(
            f"option '{column}RecordName' must be a name like 'shop.Customer', got {name!r}"
        )
    return ColumnFormat(column, fmt, choice, strategy, name)


def _registry(given: Mapping[str, str]) -> RegistryConfig:
    settings: dict[str, str] = {}
    for key, raw in given.items():
        if not key.startswith(REGISTRY_PREFIX):
            continue
        name = key[len(REGISTRY_PREFIX) :]
        if name not in REGISTRY_SETTINGS:
            raise OptionError(
                f"unknown option 'schema.registry.{name}'; known: "
                + ", ".join(sorted(REGISTRY_SETTINGS.values()))
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
        ("bearer.auth.credentials.source", ("static_token",)),
    ):
        if source_key in settings:
            parse_choice(f"schema.registry.{source_key}", settings[source_key], wanted)
    user_info = settings.get("basic.auth.user.info")
    if user_info is not None and ":" not in user_info:
        raise OptionError(
            "option 'schema.registry.basic.auth.user.info' must be 'user:password' "
            "(value not shown)"
        )
    token = settings.get("bearer.auth.token")
    if user_info is not None and token is not None:
        raise OptionError(
            "options 'schema.registry.basic.auth.user.info' and "
            "'schema.registry.bearer.auth.token' both set: give one way to log in"
        )
    cert = settings.get("ssl.certificate.location")
    key_file = settings.get("ssl.key.location")
    if key_file is not None and cert is None:
        raise OptionError(
            "option 'schema.registry.ssl.key.location' needs "
            "'schema.registry.ssl.certificate.location' (the client certificate)"
        )
    timeout = settings.get("request.timeout.ms", _DEFAULTS["schema.registry.request.timeout.ms"])
    return RegistryConfig(
        urls=urls,
        user_info=user_info,
        bearer_token=token,
        ca_location=settings.get("ssl.ca.location"),
        certificate_location=cert,
        key_location=key_file,
        key_password=settings.get("ssl.key.password"),
        request_timeout_ms=parse_duration_ms(
            "schema.registry.request.timeout.ms", str(timeout), minimum=1
        ),
    )
