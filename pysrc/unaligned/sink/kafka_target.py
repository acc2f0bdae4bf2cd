"""The Kafka target of ``df.writeStream.format("unaligned")``: its options parsed and checked.

:func:`parse_kafka_target` takes the sink's options (lower-cased keys) and their ``kafka.*``
ones without the prefix, and returns a frozen :class:`KafkaTarget`: ``deliveryGuarantee``
(:class:`DeliveryGuarantee`; the options only transactions read are refused with
``at-least-once``), the producer settings that would break exactly-once refused
(``transactional.id``, serializers, idempotence off, ``acks`` other than all, more than 5 in
flight), the effective ``transaction.timeout.ms``, ``transactionalIdPrefix``, KIP-939
participation (:class:`TwoPhaseCommitMode`), ``maxUnacknowledgedBytes`` and the Schema
Registry formats. The rest of the sink's options: :mod:`unaligned.sink.options`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from unaligned._parsing import KAFKA_PREFIX, parse_bytes, parse_choice, parse_duration_ms
from unaligned.errors import SinkConfigurationError
from unaligned.kafka.clients.producer_options import producer_kwargs
from unaligned.registry.options import RecordFormats, parse_formats

DEFAULT_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
DEFAULT_MAX_UNACKNOWLEDGED_BYTES = 4 * 1024 * 1024

_FORBIDDEN_KAFKA = {
    "transactional.id": "the sink opens one transactional id per (query, batch, task) itself; "
    "set transactionalIdPrefix instead",
    "key.serializer": "the sink writes keys as bytes",
    "value.serializer": "the sink writes values as bytes",
}


class DeliveryGuarantee(enum.Enum):
    """``deliveryGuarantee`` of the Kafka sink."""

    EXACTLY_ONCE = "exactly-once"
    """Each task's records in a Kafka transaction the driver commits with the batch
    (:mod:`unaligned.sink.topics.kafka_participant`)."""
    AT_LEAST_ONCE = "at-least-once"
    """Each task's records written by an idempotent producer without a transaction, visible
    once acknowledged; a batch written again after a crash shows its records twice, none is
    lost (:mod:`unaligned.sink.topics.kafka_at_least_once`). For clusters without transactions
    (Azure Event Hubs)."""


#: Options that only transactions read: refused with ``deliveryGuarantee=at-least-once``.
_TRANSACTION_ONLY = (
    "transactionalIdPrefix",
    "kafka.transaction.timeout.ms",
    "kafka.transaction.two.phase.commit.enable",
)


class TwoPhaseCommitMode(enum.Enum):
    """``kafka.transaction.two.phase.commit.enable`` (KIP-939): whether the sink's transactions
    take part in two-phase commit, so that the broker never aborts a prepared one on its
    timeout (:mod:`unaligned.kafka.transactions.participation`)."""

    AUTO = "auto"
    """Where every broker supports it; otherwise today's transactions, said once at start."""
    ON = "true"
    """Required: a cluster without it is refused at start, saying what is missing."""
    OFF = "false"
    """Today's transactions, aborted by the broker after ``kafka.transaction.timeout.ms``."""


@dataclass(frozen=True)
class KafkaTarget:
    """Write to Kafka transactions.

    ``kafka_params`` holds every ``kafka.*`` option without the prefix, including the effective
    ``transaction.timeout.ms``; ``topic`` is ``None`` when each row names its topic.
    """

    kafka_params: Mapping[str, str] = field(repr=False)  # may hold secrets: never logged
    topic: str | None
    transaction_timeout_ms: int
    transactional_id_prefix: str | None
    max_unacknowledged_bytes: int
    two_phase_commit: TwoPhaseCommitMode = TwoPhaseCommitMode.AUTO
    formats: RecordFormats | None = None
    """Schema Registry formats of ``key``/``value`` (:mod:`unaligned.registry`); ``None``:
    both written as the bytes the rows hold."""
    delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_params["bootstrap.servers"]

    def client_kwargs(self) -> dict[str, Any]:
        """kafka-python ``KafkaProducer`` kwargs for these options (see :func:`producer_kwargs`)."""
        return producer_kwargs(self.kafka_params)


def _delivery_guarantee(
    opts: Mapping[str, str], kafka_params: Mapping[str, str]
) -> DeliveryGuarantee:
    raw = opts.get("deliveryguarantee", DeliveryGuarantee.EXACTLY_ONCE.value)
    guarantee = DeliveryGuarantee(
        parse_choice(
            "deliveryGuarantee",
            raw.strip().lower().replace("_", "-"),
            [g.value for g in DeliveryGuarantee],
        )
    )
    if guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
        for name in _TRANSACTION_ONLY:
            key = name[len(KAFKA_PREFIX) :] if name.startswith(KAFKA_PREFIX) else None
            if (key in kafka_params) if key is not None else (name.lower() in opts):
                raise SinkConfigurationError(
                    f"option '{name}' applies to deliveryGuarantee=exactly-once only: the "
                    "at-least-once sink writes without transactions"
                )
    return guarantee


def parse_kafka_target(opts: Mapping[str, str], kafka_params: dict[str, str]) -> KafkaTarget:
    guarantee = _delivery_guarantee(opts, kafka_params)
    for name, why in _FORBIDDEN_KAFKA.items():
        if name in kafka_params:
            raise SinkConfigurationError(f"option 'kafka.{name}' is not allowed: {why}")
    idempotence = kafka_params.get("enable.idempotence", "true").strip().lower()
    if idempotence != "true":
        raise SinkConfigurationError(
            f"option 'kafka.enable.idempotence' = {kafka_params['enable.idempotence']!r} is not "
            "supported: both delivery guarantees write with the idempotent producer (records "
            "in order, a retried batch written once)"
        )
    acks = kafka_params.get("acks", "all").strip().lower()
    if acks not in ("all", "-1"):
        raise SinkConfigurationError(
            f"option 'kafka.acks' = {kafka_params['acks']!r} makes exactly-once impossible: "
            "transactions need acks=all"
        )
    in_flight = kafka_params.get("max.in.flight.requests.per.connection")
    if in_flight is not None and (not in_flight.strip().isdigit() or int(in_flight) > 5):
        raise SinkConfigurationError(
            f"option 'kafka.max.in.flight.requests.per.connection' = {in_flight!r}: the idempotent "
            "producer keeps order only with at most 5"
        )
    raw_timeout = kafka_params.get("transaction.timeout.ms")
    timeout_ms = (
        DEFAULT_TRANSACTION_TIMEOUT_MS
        if raw_timeout is None
        else parse_duration_ms("kafka.transaction.timeout.ms", raw_timeout, minimum=1)
    )
    kafka_params["transaction.timeout.ms"] = str(timeout_ms)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise SinkConfigurationError("option 'topic' is empty")
    prefix = opts.get("transactionalidprefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix or any(c.isspace() for c in prefix):
            raise SinkConfigurationError(
                "option 'transactionalIdPrefix' must be non-empty without whitespace, "
                f"got {prefix!r}"
            )
    raw_two_phase = kafka_params.pop("transaction.two.phase.commit.enable", "auto")
    two_phase = TwoPhaseCommitMode(
        parse_choice(
            "kafka.transaction.two.phase.commit.enable",
            raw_two_phase,
            [m.value for m in TwoPhaseCommitMode],
        )
    )
    return KafkaTarget(
        kafka_params=dict(kafka_params),
        two_phase_commit=two_phase,
        delivery_guarantee=guarantee,
        topic=topic,
        transaction_timeout_ms=timeout_ms,
        transactional_id_prefix=prefix,
        max_unacknowledged_bytes=(
            DEFAULT_MAX_UNACKNOWLEDGED_BYTES
            if (raw_bytes := opts.get("maxunacknowledgedbytes")) is None
            else parse_bytes("maxUnacknowledgedBytes", raw_bytes, 1)
        ),
        formats=parse_formats(opts, sink=True),
    )
