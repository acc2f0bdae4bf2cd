"""``kafka.*`` options of the sink -> the ``KafkaProducer`` settings its produce session uses.

:func:`producer_kwargs` maps the connection and security names through
:func:`unaligned.kafka.clients.client_options.client_config_from_options` (the one mapping of shared
names, secrets redacted) and the producer-only names here (``linger.ms``, ``batch.size``,
``compression.type``, ``delivery.timeout.ms``, ``max.request.size``...); a consumer-only setting
is refused by name. ``acks=all``, idempotence and the transaction timeout are forced
(:mod:`unaligned.sink.options` checks the user did not ask otherwise). Defaults that differ from
kafka-python's are in :data:`PRODUCER_DEFAULTS`. docs/reference/sink-options.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unaligned.errors import OptionError
from unaligned.kafka.clients.client_options import API_TIMEOUT_KWARG, client_config_from_options
from unaligned.kafka.login.sasl_options import TOKEN_SOURCE_KWARG
from unaligned.kafka.login.tls_options import TLS_KWARG
from unaligned.options.parsing import (
    KAFKA_PREFIX,
    parse_bytes,
    parse_duration_ms,
    parse_non_negative,
    parse_positive,
)

# Producer-only Java client names -> kafka-python keyword (shared ones: client_options._MAPPED).
_PRODUCER_ONLY: dict[str, str] = {
    "linger.ms": "linger_ms",
    "batch.size": "batch_size",
    "compression.type": "compression_type",
    "max.in.flight.requests.per.connection": "max_in_flight_requests_per_connection",
    "delivery.timeout.ms": "delivery_timeout_ms",
    "max.block.ms": "max_block_ms",
    "retries": "retries",
    "max.request.size": "max_request_size",
}
_PRODUCER_CHECKED = frozenset(
    {"acks", "enable.idempotence", "transaction.timeout.ms", "transaction.two.phase.commit.enable"}
)
#: The kwarg that says the sink's transactions take part in two-phase commit (KIP-939,
#: ``InitProducerId`` v6 with ``enable2Pc``); set by the sink once the brokers support it.
#: kafka-python has no such setting: it is taken out before any kafka-python client is built.
TWO_PHASE_COMMIT_KWARG = "transaction_two_phase_commit"
#: The package's own kwargs (not kafka-python names) that pass from the shared options.
_OWN_KWARGS = frozenset({API_TIMEOUT_KWARG, TLS_KWARG, TOKEN_SOURCE_KWARG})
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "linger_ms": 5,
    # The fast path encodes each chunk's batches up front: one request per batch, so fuller
    # batches only save work (1 MiB: 19% less task CPU than 256 KiB at 100-byte records).
    # Capped by max.request.size and each topic's max.message.bytes (kafka/topic_limits).
    "batch_size": 1024 * 1024,
    "allow_auto_create_topics": False,
    "metrics_enabled": False,
    # init_transactions sleeps this long twice while it finds the coordinator (100 ms made
    # every task 200 ms late); also the backoff of produce and CONCURRENT_TRANSACTIONS retries.
    "retry_backoff_ms": 10,
}


def producer_kwargs(kafka_params: Mapping[str, str]) -> dict[str, Any]:
    """``kafka.*`` options (prefix stripped) -> ``KafkaProducer`` kwargs for a transactional sink.

    Shared names go through :func:`client_config_from_options`, producer-only ones through
    ``_PRODUCER_ONLY``; ``acks=all``, idempotence and the transaction timeout are forced. A
    consumer-only setting is refused by name.
    """
    shared = {
        k: v
        for k, v in kafka_params.items()
        if k not in _PRODUCER_ONLY and k not in _PRODUCER_CHECKED
    }
    config = client_config_from_options(shared)
    from kafka import KafkaProducer  # here: parsing the source's options needs no kafka-python

    kwargs: dict[str, Any] = dict(PRODUCER_DEFAULTS)
    for name, value in config.client_kwargs.items():
        if name not in KafkaProducer.DEFAULT_CONFIG and name not in _OWN_KWARGS:
            raise OptionError(
                f"option 'kafka.{name.replace('_', '.')}' is a consumer setting; the sink's "
                "producer has no such setting"
            )
        kwargs[name] = value
    for key, name in _PRODUCER_ONLY.items():
        if key not in kafka_params:
            continue
        raw = kafka_params[key]
        if name == "compression_type":
            codec = raw.strip().lower()
            kwargs[name] = None if codec == "none" else codec
        elif name == "retries":
            kwargs[name] = parse_non_negative(KAFKA_PREFIX + key, raw)
        elif name == "linger_ms":
            kwargs[name] = parse_duration_ms(KAFKA_PREFIX + key, raw)
        elif key.endswith(".ms"):
            kwargs[name] = parse_duration_ms(KAFKA_PREFIX + key, raw, minimum=1)
        elif key in ("batch.size", "max.request.size"):
            kwargs[name] = parse_bytes(KAFKA_PREFIX + key, raw, minimum=1)
        else:
            kwargs[name] = parse_positive(KAFKA_PREFIX + key, raw)
    kwargs.setdefault("bootstrap_timeout_ms", config.request_timeout_ms)
    kwargs["acks"] = "all"
    kwargs["enable_idempotence"] = True
    kwargs["transaction_timeout_ms"] = int(kafka_params["transaction.timeout.ms"])
    return kwargs
