"""Producers and shared helpers for keeping kafka-python clients per cluster and settings.

:func:`build_producer` gives a ``KafkaProducer`` (from sink kwargs:
:func:`unaligned.kafka.clients.producer_options.producer_kwargs`), used to fence a transactional
id; :func:`settings_key` makes client settings a key for what a process keeps per cluster
(:mod:`unaligned.kafka.clients.admin_clients`, the read path's own sockets), and
:func:`describe_servers` names a cluster in error messages. The driver's look-ups are
:mod:`unaligned.kafka.clients.offset_lookup`'s.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from kafka import KafkaProducer
from kafka import errors as kafka_errors
from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_internals import give_metadata_retry_backoff
from unaligned.kafka.clients.client_options import kafka_python_kwargs
from unaligned.kafka.clients.socket_login import explain_bootstrap_failure


def build_producer(kwargs: Mapping[str, Any]) -> KafkaProducer:
    """A ``KafkaProducer``; bootstrap (bounded by ``bootstrap_timeout_ms``) failing raises
    :class:`KafkaUnavailableError` naming the bootstrap servers.

    kafka-python 3.0.12 builds the producer's cluster metadata without ``retry_backoff_ms``, so a
    topic's metadata, asked for right after bootstrap, waited out the default 100 ms: this sets
    the producer's own value there (the private ``_metadata.config``, pinned by
    ``tests/kafka/clients/test_connections.py``)."""
    try:
        producer = KafkaProducer(**kafka_python_kwargs(kwargs, KafkaProducer.DEFAULT_CONFIG))
    except kafka_errors.KafkaTimeoutError as exc:
        timeout_s = int(kwargs.get("request_timeout_ms", 30_000)) / 1000
        explain_bootstrap_failure(kwargs, timeout_s)  # a refused login says so
        raise KafkaUnavailableError(
            f"could not reach Kafka at {describe_servers(kwargs)}: {exc!r}"
        ) from exc
    give_metadata_retry_backoff(producer)
    return producer


SettingsKey = tuple[tuple[str, Hashable], ...]


def settings_key(client_kwargs: Mapping[str, Any]) -> SettingsKey:
    """``client_kwargs`` as a hashable key, for what a process keeps per cluster and settings.

    Hashable values stand for themselves (login settings compare by every field, secrets
    included, though their ``repr`` hides them); lists become tuples, anything else its
    ``repr``."""
    return tuple(sorted((k, _key_value(v)) for k, v in client_kwargs.items()))


def _key_value(value: Any) -> Hashable:
    if isinstance(value, (list, tuple)):
        return tuple(_key_value(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


def describe_servers(client_kwargs: Mapping[str, Any]) -> str:
    """The bootstrap servers of ``client_kwargs`` as one string, for error messages."""
    servers = client_kwargs.get("bootstrap_servers", "localhost")
    return ",".join(servers) if isinstance(servers, (list, tuple)) else str(servers)
