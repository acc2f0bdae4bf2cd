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
from typing import Any, TypeVar

from unaligned.errors import SinkConfigurationError
from unaligned.kafka.clients.producer_options import producer_kwargs
from unaligned.options.declaration import OptionSpec, text
from unaligned.options.parsing import KAFKA_PREFIX, parse_bytes, parse_choice, parse_duration_ms
from unaligned.registry.options import RecordFormats, parse_formats

T = TypeVar("T")

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


def _delivery(name: str, raw: str) -> DeliveryGuarantee:
    allowed = [g.value for g in DeliveryGuarantee]
    return DeliveryGuarantee(parse_choice(name, raw.strip().lower().replace("_", "-"), allowed))


def _two_phase(name: str, raw: str) -> TwoPhaseCommitMode:
    return TwoPhaseCommitMode(parse_choice(name, raw, [m.value for m in TwoPhaseCommitMode]))


def _positive_bytes(name: str, raw: str) -> int:
    return parse_bytes(name, raw, 1)


def _positive_ms(name: str, raw: str) -> int:
    return parse_duration_ms(name, raw, minimum=1)


# kafka.* options are passed to the producer, which only the Kafka target has; like every other
# kafka.* option they are not refused on a file sink (only_for stays None).
BOOTSTRAP_SERVERS: OptionSpec[str] = OptionSpec(
    "kafka.bootstrap.servers",
    "write to this Kafka cluster (with `topic`, or a `topic` column)",
)
TOPIC: OptionSpec[str] = OptionSpec(
    "topic",
    "the topic written; without it each row's `topic` column names one",
    text,
    only_for="Kafka",
)
DELIVERY_GUARANTEE: OptionSpec[DeliveryGuarantee] = OptionSpec(
    "deliveryGuarantee",
    "`exactly-once` (each task's records in a transaction the driver commits with the batch) "
    "or `at-least-once` (an idempotent producer, no transaction: "
    "[At-least-once](../guides/writing-kafka.md#at-least-once))",
    _delivery,
    "exactly-once",
    only_for="Kafka",
)
TRANSACTIONAL_ID_PREFIX: OptionSpec[str] = OptionSpec(
    "transactionalIdPrefix",
    "prefix of the sink's `transactional.id`s: a bounded pool `<prefix>-<task>-<slot>`, "
    "reused once its previous transaction ended",
    text,
    default_text="`unaligned-<query id>`",
    only_for="Kafka",
)
MAX_UNACKNOWLEDGED_BYTES: OptionSpec[int] = OptionSpec(
    "maxUnacknowledgedBytes",
    "bytes a task may have sent but not had acknowledged between chunks; with a slow or "
    "throttled broker, lower it so a barrier ends closer to its timeout",
    _positive_bytes,
    "4MB",
    only_for="Kafka",
)
TRANSACTION_TIMEOUT: OptionSpec[int] = OptionSpec(
    "kafka.transaction.timeout.ms",
    "must cover batch time plus restart time, at most the brokers' "
    "`transaction.max.timeout.ms` (checked at start); a batch whose transactions would expire "
    "first is not decided (`TransactionExpiredError`)",
    _positive_ms,
    "900000",
)
TWO_PHASE_COMMIT: OptionSpec[TwoPhaseCommitMode] = OptionSpec(
    "kafka.transaction.two.phase.commit.enable",
    "take part in two-phase commit (KIP-939) so that no broker timeout aborts a prepared "
    "transaction: `auto` where every broker supports it, `true` (required), `false`; "
    "[Prepared transactions that never expire](../concepts/guarantees.md#two-phase-commit)",
    _two_phase,
    "auto",
)
KAFKA_SPECS: tuple[OptionSpec[Any], ...] = (
    BOOTSTRAP_SERVERS,
    TOPIC,
    DELIVERY_GUARANTEE,
    TRANSACTIONAL_ID_PREFIX,
    MAX_UNACKNOWLEDGED_BYTES,
    TRANSACTION_TIMEOUT,
    TWO_PHASE_COMMIT,
    OptionSpec(
        "kafka.batch.size",
        "the largest record batch the sink encodes (cut further to each topic's "
        "`max.message.bytes`; a batch the broker refuses as too large is split and sent again)",
        default="1048576",
    ),
    OptionSpec(
        "kafka.*",
        "passed to the producer in Java's names (logging in: [Security](../guides/security.md)); "
        "settings that would break the guarantee are refused",
    ),
)
#: The options only transactions read: refused with ``deliveryGuarantee=at-least-once``.
_TRANSACTION_ONLY = (TRANSACTIONAL_ID_PREFIX, TRANSACTION_TIMEOUT, TWO_PHASE_COMMIT)
DEFAULT_TRANSACTION_TIMEOUT_MS = TRANSACTION_TIMEOUT.value({})
DEFAULT_MAX_UNACKNOWLEDGED_BYTES = MAX_UNACKNOWLEDGED_BYTES.value({})


def _kafka_value(spec: OptionSpec[T], kafka_params: Mapping[str, str]) -> T:
    """A ``kafka.*`` option's value from ``kafka_params`` (keys without the prefix)."""
    raw = kafka_params.get(spec.key[len(KAFKA_PREFIX) :])
    return spec.value({} if raw is None else {spec.key: raw})


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
    guarantee = DELIVERY_GUARANTEE.value(opts)
    if guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
        for spec in _TRANSACTION_ONLY:
            name = spec.name
            key = name[len(KAFKA_PREFIX) :] if name.startswith(KAFKA_PREFIX) else None
            if (key in kafka_params) if key is not None else (spec.key in opts):
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
    timeout_ms = _kafka_value(TRANSACTION_TIMEOUT, kafka_params)
    kafka_params["transaction.timeout.ms"] = str(timeout_ms)
    topic = opts.get(TOPIC.key)
    if topic is not None and not topic.strip():
        raise SinkConfigurationError("option 'topic' is empty")
    prefix = opts.get(TRANSACTIONAL_ID_PREFIX.key)
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix or any(c.isspace() for c in prefix):
            raise SinkConfigurationError(
                "option 'transactionalIdPrefix' must be non-empty without whitespace, "
                f"got {prefix!r}"
            )
    two_phase = _kafka_value(TWO_PHASE_COMMIT, kafka_params)
    kafka_params.pop("transaction.two.phase.commit.enable", None)
    return KafkaTarget(
        kafka_params=dict(kafka_params),
        two_phase_commit=two_phase,
        delivery_guarantee=guarantee,
        topic=topic,
        transaction_timeout_ms=timeout_ms,
        transactional_id_prefix=prefix,
        max_unacknowledged_bytes=MAX_UNACKNOWLEDGED_BYTES.value(opts),
        formats=parse_formats(opts, sink=True),
    )
