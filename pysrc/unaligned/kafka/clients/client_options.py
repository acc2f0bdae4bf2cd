"""``kafka.*`` options -> kafka-python keyword arguments, validated, with secrets redacted.

Spark passes every ``kafka.<name>`` option to the Java client; this module maps the Java names
onto kafka-python's keyword arguments for consumers and the names clients share (the sink's
producer-only names: :mod:`unaligned.kafka.clients.producer_options`), rejects what Spark rejects
(with Spark's reasons) and what kafka-python has no equivalent for (never silently ignored).
Messages name the option and never echo a secret. Connecting:
:mod:`unaligned.kafka.clients.connections`.

Logging in (security protocol, SASL mechanisms, OAuth, TLS stores) is mapped by
:mod:`unaligned.kafka.login.sasl_options` and :mod:`unaligned.kafka.login.tls_options`, into
plain settings that travel with the kwargs; :func:`kafka_python_kwargs` makes what they stand for
(an ``SSLContext``, a token provider) in the process that builds a client
(:mod:`unaligned.kafka.login.client_login`). :func:`is_secret` names every option whose value
is never shown (passwords, JAAS entries, client secrets, tokens, inline private keys).

Defaults that differ from kafka-python's: ``max.partition.fetch.bytes`` 8 MiB (one partition per
reader: fewer round trips), ``allow.auto.create.topics`` false, ``retry.backoff.ms`` 10
(kafka-python idles that long in ``poll()``), and ``check.crcs`` false unless the ``crc32c`` C
extension is installed (pure-Python CRC-32C would cost most of the read throughput).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from unaligned.errors import OptionError
from unaligned.kafka.login.sasl_options import MECHANISMS, SASL_OPTIONS, map_sasl
from unaligned.kafka.login.tls_options import TLS_OPTIONS, map_tls
from unaligned.options.parsing import (
    KAFKA_PREFIX,
    invalid,
    parse_bool,
    parse_bytes,
    parse_duration_ms,
    parse_non_negative,
)

logger = logging.getLogger(__name__)

REDACTED = "*****(redacted)"
#: Java's ``default.api.timeout.ms`` default.
DEFAULT_API_TIMEOUT_MS = 60_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
#: The kwarg that carries ``kafka.default.api.timeout.ms``; kafka-python has no such setting.
API_TIMEOUT_KWARG = "default_api_timeout_ms"


def _fast_crc32c() -> bool:
    """Whether kafka-python checks CRCs in C (``crc32c`` installed): then checking is cheap."""
    from kafka.record import util as record_util  # here: option parsing imports no kafka-python

    return record_util.crc32c_c is not None


_SECRET_WORDS = ("password", "jaas", "secret", "token", "credential", "private.key")
#: Secret options no word of :data:`_SECRET_WORDS` names: an inline private key.
_SECRET_NAMES = frozenset({"ssl.keystore.key"})

# Spark's KafkaSourceProvider rejects these (reasons as Spark gives them).
_REJECTED: dict[str, str] = {
    "auto.offset.reset": (
        "is not supported: set the source option 'startingOffsets' to 'earliest' or 'latest' "
        "instead; the source tracks offsets in Spark's checkpoint, and a restarted query always "
        "resumes where it left off"
    ),
    "key.deserializer": (
        "is not supported: keys are read as bytes; use DataFrame operations to deserialize them"
    ),
    "value.deserializer": (
        "is not supported: values are read as bytes; use DataFrame operations to deserialize them"
    ),
    "enable.auto.commit": (
        "is not supported: the source never commits offsets to Kafka (they live in Spark's "
        "checkpoint)"
    ),
    "interceptor.classes": "is not supported: interceptors can modify records, which is not safe",
}


def _as_int(key: str, raw: str) -> int:
    return parse_non_negative(KAFKA_PREFIX + key, raw)


def _as_size(key: str, raw: str) -> int:
    """A ``*.bytes`` setting: the one size parser (``1048576``, ``64KB``, ``1MB``)."""
    return parse_bytes(KAFKA_PREFIX + key, raw)


def _as_ms(key: str, raw: str) -> int:
    """A ``*.ms`` setting: the one duration parser (a bare number is ms; ``30s`` too)."""
    return parse_duration_ms(KAFKA_PREFIX + key, raw)


def _as_bool(key: str, raw: str) -> bool:
    return parse_bool(KAFKA_PREFIX + key, raw)


def _as_str(key: str, raw: str) -> str:
    if not raw.strip():
        raise OptionError(f"option 'kafka.{key}' must not be empty")
    return raw.strip()


def _choice(*allowed: str, upper: bool = False) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in allowed:
            raise invalid(KAFKA_PREFIX + key, "one of " + ", ".join(allowed), raw)
        return value

    return parse


def _servers(key: str, raw: str) -> list[str]:
    servers = [s.strip() for s in raw.split(",") if s.strip()]
    if not servers:
        raise OptionError(f"option 'kafka.{key}' names no servers")
    return servers


# Java client name -> (kafka-python keyword, parser); more than a rename: ``_map_special``.
_MAPPED: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "bootstrap.servers": ("bootstrap_servers", _servers),
    "client.id": ("client_id", _as_str),
    "client.rack": ("client_rack", _as_str),
    "group.id": ("group_id", _as_str),
    "request.timeout.ms": ("request_timeout_ms", _as_ms),
    # Not a kafka-python setting: the package's own bound on asking again (clients/retries.py);
    # taken out before any kafka-python client is built (``kafka_python_kwargs``).
    "default.api.timeout.ms": (API_TIMEOUT_KWARG, _as_ms),
    "isolation.level": ("isolation_level", _choice("read_uncommitted", "read_committed")),
    "security.protocol": (
        "security_protocol",
        _choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", upper=True),
    ),
    "sasl.mechanism": ("sasl_mechanism", _choice(*MECHANISMS, upper=True)),
    "sasl.kerberos.service.name": ("sasl_kerberos_service_name", _as_str),
    "fetch.max.bytes": ("fetch_max_bytes", _as_size),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _as_size),
    "fetch.min.bytes": ("fetch_min_bytes", _as_size),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _as_ms),
    "max.poll.records": ("max_poll_records", _as_int),
    "receive.buffer.bytes": ("receive_buffer_bytes", _as_size),
    "send.buffer.bytes": ("send_buffer_bytes", _as_size),
    "retry.backoff.ms": ("retry_backoff_ms", _as_ms),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _as_ms),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _as_ms),
    "connections.max.idle.ms": ("connections_max_idle_ms", _as_ms),
    "metadata.max.age.ms": ("metadata_max_age_ms", _as_ms),
    "session.timeout.ms": ("session_timeout_ms", _as_ms),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _as_ms),
    "max.poll.interval.ms": ("max_poll_interval_ms", _as_ms),
    "check.crcs": ("check_crcs", _as_bool),
    "allow.auto.create.topics": ("allow_auto_create_topics", _as_bool),
    "client.dns.lookup": (
        "client_dns_lookup",
        _choice("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
    ),
}

#: Names read by the login mappings (sasl_options, tls_options), not through ``_MAPPED``.
_SPECIAL = SASL_OPTIONS | TLS_OPTIONS


def is_secret(key: str) -> bool:
    """Whether the value of ``key`` (a Kafka config name) must never be shown."""
    lowered = key.lower()
    if lowered.startswith(KAFKA_PREFIX):
        lowered = lowered[len(KAFKA_PREFIX) :]
    return lowered in _SECRET_NAMES or any(word in lowered for word in _SECRET_WORDS)


def redact(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` with secret values replaced, for logs and messages."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in params.items()}


@dataclass(frozen=True)
class KafkaClientConfig:
    """The kafka-python keyword arguments for this source's consumers (validated).

    Picklable: it travels to the executors inside every input partition. Its ``repr`` shows
    the ``kafka.*`` options with secrets redacted.
    """

    bootstrap_servers: str
    client_kwargs: Mapping[str, Any] = field(repr=False)
    options: Mapping[str, str] = field(repr=False)

    @property
    def request_timeout_ms(self) -> int:
        return int(self.client_kwargs.get("request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS))

    @property
    def api_timeout_ms(self) -> int:
        """``kafka.default.api.timeout.ms``: how long a look-up keeps asking through a lost
        broker or a moved leader (Java's default, 60 s)."""
        return api_timeout_ms(self.client_kwargs)

    @property
    def read_committed(self) -> bool:
        return self.client_kwargs.get("isolation_level") == "read_committed"

    def __repr__(self) -> str:
        shown = {f"{KAFKA_PREFIX}{k}": v for k, v in redact(self.options).items()}
        return f"KafkaClientConfig({shown})"

    def consumer_kwargs(self) -> dict[str, Any]:
        """Every ``KafkaConsumer`` argument: defaults, the user's settings, then fixed ones."""
        kwargs: dict[str, Any] = {
            "client_id": "unaligned-source",
            "max_partition_fetch_bytes": 8 * 1024 * 1024,
            "fetch_max_bytes": 64 * 1024 * 1024,
            "allow_auto_create_topics": False,
            "check_crcs": _fast_crc32c(),
            "metrics_enabled": False,
            "retry_backoff_ms": 10,  # slept in poll() per leader lookup: paid by every task
        }
        kwargs.update(self.client_kwargs)
        kwargs.setdefault("bootstrap_timeout_ms", self.request_timeout_ms)
        kwargs.update(
            enable_auto_commit=False,
            auto_offset_reset="none",
            key_deserializer=None,
            value_deserializer=None,
        )
        return kwargs


def api_timeout_ms(client_kwargs: Mapping[str, Any]) -> int:
    """``kafka.default.api.timeout.ms`` of consumer or producer kwargs (60 s by default, as the
    Java clients')."""
    return int(client_kwargs.get(API_TIMEOUT_KWARG, DEFAULT_API_TIMEOUT_MS))


def kafka_python_kwargs(
    client_kwargs: Mapping[str, Any], accepted: Mapping[str, Any]
) -> dict[str, Any]:
    """``client_kwargs`` as the kafka-python client whose ``DEFAULT_CONFIG`` is ``accepted``
    takes them: the login material made in this process (``ssl_context``, the OAuth token
    provider: :func:`unaligned.kafka.login.client_login.login_kwargs`), without what that
    client does not take (the package's own settings, another client's names)."""
    from unaligned.kafka.login.client_login import login_kwargs  # here: parsing needs no ssl

    return {k: v for k, v in login_kwargs(client_kwargs).items() if k in accepted}


def client_config_from_options(params: Mapping[str, str]) -> KafkaClientConfig:
    """Validate ``kafka.*`` options (names without the ``kafka.`` prefix, lower case) and map
    them to kafka-python keyword arguments. Raises :class:`OptionError` naming the option."""
    if "bootstrap.servers" not in params:
        raise OptionError("option 'kafka.bootstrap.servers' must be specified for the Kafka source")
    kwargs: dict[str, Any] = {}
    for key in sorted(params):
        raw = params[key]
        if key in _REJECTED:
            raise OptionError(f"option 'kafka.{key}' {_REJECTED[key]}")
        if key in _SPECIAL:
            continue
        if key not in _MAPPED:
            raise OptionError(
                f"option 'kafka.{key}' is not supported: kafka-python has no equivalent of this "
                "Kafka client setting"
            )
        name, parse = _MAPPED[key]
        kwargs[name] = parse(key, raw)
    map_sasl(params, kwargs)
    map_tls(params, kwargs)
    if "group.id" in params:
        logger.warning(
            "kafka.group.id is set: the source reads with assign(), never joins the group, and "
            "commits each batch's end offsets to it for monitoring only (never read back)"
        )
    return KafkaClientConfig(
        bootstrap_servers=",".join(kwargs["bootstrap_servers"]),
        client_kwargs=kwargs,
        options=dict(params),
    )
