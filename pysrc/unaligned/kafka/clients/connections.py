"""Producers and shared helpers for keeping kafka-python clients per cluster and settings.

:func:`build_producer` gives a ``KafkaProducer`` (from sink kwargs:
:func:`unaligned.kafka.clients.producer_options.producer_kwargs`), used to fence a transactional
id; :func:`settings_key` makes client settings a key for what a process keeps per cluster
(:mod:`unaligned.kafka.clients.admin_clients`, the read path's own sockets), and
:func:`describe_servers` names a cluster in error messages. The driver's look-ups are
:mod:`unaligned.kafka.clients.offset_lookup`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import KafkaProducer
from kafka import errors as kafka_errors
from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_internals import give_metadata_retry_backoff
from unaligned.kafka.clients.client_options import kafka_python_kwargs


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
        raise KafkaUnavailableError(
            f"could not reach Kafka at {describe_servers(kwargs)}: {exc!r}"
        ) from exc
    give_metadata_retry_backoff(producer)
    return producer


SettingsKey = tuple[tuple[str, str], ...]


def settings_key(client_kwargs: Mapping[str, Any]) -> SettingsKey:
    """``client_kwargs`` as a hashable key, for what a process keeps per cluster and settings."""
    return tuple(sorted((k, repr(v)) for k, v in client_kwargs.items()))


def describe_servers(client_kwargs: Mapping[str, Any]) -> str:
    """The bootstrap servers of ``client_kwargs`` as one string, for error messages."""
    servers = client_kwargs.get("bootstrap_servers", "localhost")
    return ",".join(servers) if isinstance(servers, (list, tuple)) else str(servers)
