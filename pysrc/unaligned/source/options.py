"""Options of ``spark.readStream.format("unaligned")``: Spark's Kafka source option names.

Keys are case-insensitive, as Spark's are. Every option is checked when the query is defined;
an unknown option, a malformed value, or options that contradict each other raise
:class:`~unaligned.errors.OptionError` naming the option in Spark's spelling. This module holds
the subscription and :class:`SourceOptions`, which checks the options against each other;
starting and ending positions are parsed in :mod:`unaligned.source.position_options`. What each
option means: its declaration in :mod:`unaligned.source.option_specs`. Adding an option: a
field of :class:`SourceOptions` and one declaration in ``READ_SPECS`` (``sets`` names the field).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from unaligned.errors import OptionError
from unaligned.kafka.clients.client_options import (
    KafkaClientConfig,
    client_config_from_options,
    is_secret,
)
from unaligned.kafka.partitions import TopicPartitionId, format_partitions
from unaligned.options.parsing import kafka_params
from unaligned.registry.options import RecordFormats, is_format_option, parse_formats
from unaligned.source.offset_options import parse_assign
from unaligned.source.option_specs import (
    KNOWN_OPTION_NAMES,
    READ_SPECS,
    SOURCE_OPTIONS,
    SUBSCRIPTION_NAMES,
)
from unaligned.source.position_options import (
    EndingPosition,
    LatestStart,
    NoMatchStrategy,
    OffsetsEnd,
    OffsetsStart,
    PartitionTimestampsEnd,
    PartitionTimestampsStart,
    StartingPosition,
    check_batch_start,
    parse_ending,
    parse_starting,
)

# --- parsed values -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscribe:
    """``subscribe``: these topics (each must exist when first looked up)."""

    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    """``subscribePattern``: every non-internal topic the regex finds a match in."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.search(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    """``assign``: exactly these partitions."""

    partitions: tuple[TopicPartitionId, ...]


Subscription = Subscribe | SubscribePattern | Assign


def _parse_subscription(key: str, raw: str) -> Subscription:
    name = SUBSCRIPTION_NAMES[key]
    if key == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"option 'subscribe' names no topics: {raw!r}")
        return Subscribe(topics)
    if key == "subscribepattern":
        pattern = raw.strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(
                f"option 'subscribePattern' is not a valid regex ({exc}): {raw!r}"
            ) from None
        return SubscribePattern(pattern)
    if not raw.strip().startswith("{"):
        raise OptionError(f"option '{name}' must be JSON like {{\"topic\": [0, 1]}}, got {raw!r}")
    return Assign(parse_assign(raw, f"option '{name}'"))


def _lower_keys(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(lower-case key -> value, lower-case key -> the key as the user wrote it)."""
    lowered: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if value is None:
            raise OptionError(f"option '{key}' has no value")
        if low in lowered and lowered[low] != str(value):
            shown = " (values not shown)" if is_secret(low) else ""
            raise OptionError(
                f"option '{spelled[low]}' is given twice with different values, "
                f"also as '{key}'{shown}"
            )
        lowered[low] = str(value)
        spelled.setdefault(low, key)
    return lowered, spelled


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one ``readStream.format("unaligned")``."""

    subscription: Subscription
    kafka: KafkaClientConfig
    starting: StartingPosition = field(default_factory=LatestStart)
    ending: EndingPosition | None = None
    """Bounded input (``endingOffsets`` & co.); ``None``: unbounded (streaming only)."""
    no_match_strategy: NoMatchStrategy = NoMatchStrategy.ERROR
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    read_tasks: int | None = None
    """Read tasks per batch as the user set it; ``None``: chosen when the query first starts
    (:meth:`unaligned.source.stream_reader.KafkaStreamReader.initialOffset`)."""
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    """At most about this many key and value bytes per batch (:mod:`.byte_limit`)."""
    max_trigger_delay_ms: int = 15 * 60 * 1000
    target_batch_duration_ms: int | None = None
    """Size batches so they take about this long (:mod:`unaligned.source.planning.batch_sizing`)."""
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    group_id_prefix: str | None = None
    """Commit end offsets to group ``<prefix>-<barrierToken>`` (:mod:`.group_offsets`)."""
    formats: RecordFormats | None = None
    """Schema Registry formats of ``key``/``value`` (:mod:`unaligned.registry`); ``None``:
    both binary."""

    @classmethod
    def parse(cls, options: Mapping[str, str], batch: bool = False) -> SourceOptions:
        """Validate Spark Kafka source options (any key case). Raises :class:`OptionError`.

        ``batch``: a ``spark.read`` query (Spark's batch defaults and checks)."""
        given, spelled = _lower_keys(options)

        chosen = [k for k in SUBSCRIPTION_NAMES if k in given]
        if len(chosen) != 1:
            names = ", ".join(SUBSCRIPTION_NAMES.values())
            verb = "One" if not chosen else "Only one"
            got = f" (got {', '.join(SUBSCRIPTION_NAMES[k] for k in chosen)})" if chosen else ""
            raise OptionError(
                f"{verb} of the options {names} must be specified for the Kafka source{got}"
            )
        subscription = _parse_subscription(chosen[0], given[chosen[0]])

        kafka = client_config_from_options(kafka_params(given))

        for key in given:
            if not SOURCE_OPTIONS.knows(key) and not is_format_option(key, sink=False):
                raise OptionError(
                    f"unknown option '{spelled[key]}' for the unaligned Kafka source; "
                    "known options: " + ", ".join(KNOWN_OPTION_NAMES)
                )
        values: dict[str, Any] = {
            spec.sets: spec.value_or_none(given) for spec in READ_SPECS if spec.sets is not None
        }
        values = {name: value for name, value in values.items() if value is not None}

        starting = parse_starting(given, batch)
        if batch:
            check_batch_start(starting)
        parsed = cls(
            subscription=subscription,
            kafka=kafka,
            starting=starting,
            ending=parse_ending(given, batch),
            formats=parse_formats(given, sink=False),
            **values,
        )
        parsed._check_consistency()
        return parsed

    @property
    def topics(self) -> tuple[str, ...] | None:
        """The subscribed topics when the subscription names them (``None``: a pattern)."""
        if isinstance(self.subscription, Subscribe):
            return self.subscription.topics
        if isinstance(self.subscription, Assign):
            return tuple(dict.fromkeys(tp.topic for tp in self.subscription.partitions))
        return None

    def _check_consistency(self) -> None:
        if self.read_tasks is not None and (
            self.min_partitions is not None or self.max_records_per_partition is not None
        ):
            raise OptionError(
                "option 'readTasks' groups topic-partitions into tasks, options 'minPartitions' "
                "and 'maxRecordsPerPartition' split them: set one or the other"
            )
        low, high = self.min_offsets_per_trigger, self.max_offsets_per_trigger
        if low is not None and high is not None and low > high:
            raise OptionError(
                f"option 'minOffsetsPerTrigger' ({low}) is higher than option "
                f"'maxOffsetsPerTrigger' ({high})"
            )
        if isinstance(self.subscription, Assign):
            assigned = set(self.subscription.partitions)
            named: set[TopicPartitionId] | None = None
            option = ""
            if isinstance(self.starting, OffsetsStart):
                named, option = set(self.starting.positions), "startingOffsets"
            elif isinstance(self.starting, PartitionTimestampsStart):
                named, option = set(self.starting.timestamps), "startingOffsetsByTimestamp"
            if named is not None and named != assigned:
                raise OptionError(
                    f"option '{option}' must name exactly the assigned partitions; "
                    f"assigned: {format_partitions(assigned)}; named: {format_partitions(named)}"
                )
            named = None
            if isinstance(self.ending, OffsetsEnd):
                named, option = set(self.ending.positions), "endingOffsets"
            elif isinstance(self.ending, PartitionTimestampsEnd):
                named, option = set(self.ending.timestamps), "endingOffsetsByTimestamp"
            if named is not None and named != assigned:
                raise OptionError(
                    f"option '{option}' must name exactly the assigned partitions; "
                    f"assigned: {format_partitions(assigned)}; named: {format_partitions(named)}"
                )
