"""Options of ``spark.readStream.format("unaligned")``: Spark's Kafka source option names.

Keys are case-insensitive, as Spark's are. Every option is validated when the query is defined;
an unknown option, a malformed value, or options that contradict each other raise
:class:`~unaligned.errors.OptionError` naming the option (in Spark's spelling).

Accepted (meanings as in Spark's Kafka source):

- exactly one of ``subscribe`` (comma list), ``subscribePattern`` (regex, searched within the
  topic name as Spark does; topics created later are picked up), ``assign`` (``{"t": [0, 1]}``);
- ``kafka.bootstrap.servers`` (required) and other ``kafka.*`` settings
  (see :mod:`unaligned.kafka.client_options`);
- starting position, by precedence as in Spark: ``startingTimestamp`` (ms, all partitions),
  ``startingOffsetsByTimestamp`` (JSON of ms per partition), ``startingOffsets`` (``earliest``,
  ``latest`` (default) or JSON with -2 / -1); ``startingOffsetsByTimestampStrategy`` ``error``
  (default) | ``latest`` for partitions with no record at or after the timestamp;
- ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay`` (Spark time string,
  default ``15m``), ``minPartitions``, ``maxRecordsPerPartition``, ``includeHeaders``,
  ``failOnDataLoss`` (default true);
- ``kafkaConsumer.pollTimeoutMs`` (default 120000: how long a task waits without progress),
  ``fetchOffset.numRetries`` and ``fetchOffset.retryIntervalMs`` (retries of the driver's offset
  lookups), ``groupIdPrefix`` (accepted; the source joins no consumer group).

- bounded input, by precedence as in Spark: ``endingTimestamp`` (ms, all partitions),
  ``endingOffsetsByTimestamp`` (JSON of ms per partition; the first offset at or after the time,
  latest when there is none), ``endingOffsets`` (``latest`` or JSON with -1 for latest). Ends
  are exclusive. Spark takes them only in batch queries; here streaming queries take them too,
  under every trigger: the ends are resolved once, when the query first starts, and recorded in
  the checkpointed offset (:mod:`unaligned.source.offsets`).

Batch queries (``spark.read``, :meth:`SourceOptions.parse` with ``batch=True``) default to
``startingOffsets=earliest`` and ``endingOffsets=latest`` and refuse a ``latest`` start or an
``earliest`` end, as Spark does.

Adding an option: add a field to :class:`SourceOptions` and one :class:`_Option` entry to
``_OPTIONS``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from unaligned._parsing import (
    KAFKA_PREFIX,
    kafka_params,
    parse_bool,
    parse_choice,
    parse_duration_ms,
    parse_non_negative,
    parse_positive,
)
from unaligned.errors import OffsetFormatError, OptionError
from unaligned.kafka.client_options import (
    KafkaClientConfig,
    client_config_from_options,
    is_secret,
)
from unaligned.kafka.partitions import TopicPartitionId, format_partitions
from unaligned.source.offsets import (
    Boundary,
    PartitionPosition,
    parse_assign,
    parse_partition_timestamps,
    parse_starting_offsets,
)

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class EarliestStart:
    """Start at the earliest offset still stored."""


@dataclass(frozen=True)
class LatestStart:
    """Start at the latest offset (only records produced after the query starts)."""


@dataclass(frozen=True)
class OffsetsStart:
    """``startingOffsets`` JSON: a position per partition (must name every partition)."""

    positions: Mapping[TopicPartitionId, PartitionPosition]


@dataclass(frozen=True)
class TimestampStart:
    """``startingTimestamp``: the first offset at or after this time, in every partition."""

    timestamp_ms: int


@dataclass(frozen=True)
class PartitionTimestampsStart:
    """``startingOffsetsByTimestamp``: per partition (must name every partition)."""

    timestamps: Mapping[TopicPartitionId, int]


StartingPosition = (
    EarliestStart | LatestStart | OffsetsStart | TimestampStart | PartitionTimestampsStart
)


@dataclass(frozen=True)
class LatestEnd:
    """``endingOffsets=latest``: the latest offsets when the query first starts."""


@dataclass(frozen=True)
class OffsetsEnd:
    """``endingOffsets`` JSON: an offset >= 0 or latest per partition (must name every one)."""

    positions: Mapping[TopicPartitionId, PartitionPosition]


@dataclass(frozen=True)
class TimestampEnd:
    """``endingTimestamp``: the first offset at or after this time, in every partition."""

    timestamp_ms: int


@dataclass(frozen=True)
class PartitionTimestampsEnd:
    """``endingOffsetsByTimestamp``: per partition (must name every partition)."""

    timestamps: Mapping[TopicPartitionId, int]


EndingPosition = LatestEnd | OffsetsEnd | TimestampEnd | PartitionTimestampsEnd


class NoMatchStrategy(Enum):
    """``startingOffsetsByTimestampStrategy``: a partition with no record at/after the time."""

    ERROR = "error"
    LATEST = "latest"


# --- value parsers (name is the option's Spark spelling) ----------------------------------------


def _no_match(name: str, raw: str) -> NoMatchStrategy:
    return NoMatchStrategy(parse_choice(name, raw, [s.value for s in NoMatchStrategy]))


def _text(name: str, raw: str) -> str:
    return raw


@dataclass(frozen=True)
class _Option:
    name: str  # Spark's spelling, used in messages
    field: str | None  # the SourceOptions field it sets; None: validated, no effect
    parse: Callable[[str, str], Any]


_OPTIONS: dict[str, _Option] = {
    o.name.lower(): o
    for o in (
        _Option("failOnDataLoss", "fail_on_data_loss", parse_bool),
        _Option("includeHeaders", "include_headers", parse_bool),
        _Option("minPartitions", "min_partitions", parse_positive),
        _Option("maxRecordsPerPartition", "max_records_per_partition", parse_positive),
        _Option("maxOffsetsPerTrigger", "max_offsets_per_trigger", parse_positive),
        _Option("minOffsetsPerTrigger", "min_offsets_per_trigger", parse_positive),
        _Option("maxTriggerDelay", "max_trigger_delay_ms", parse_duration_ms),
        _Option("targetBatchDuration", "target_batch_duration_ms", parse_duration_ms),
        _Option("kafkaConsumer.pollTimeoutMs", "poll_timeout_ms", parse_positive),
        _Option("fetchOffset.numRetries", "fetch_offset_num_retries", parse_positive),
        _Option(
            "fetchOffset.retryIntervalMs", "fetch_offset_retry_interval_ms", parse_non_negative
        ),
        _Option("startingOffsetsByTimestampStrategy", "no_match_strategy", _no_match),
        _Option("groupIdPrefix", None, _text),
    )
}

_SUBSCRIPTIONS = {
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "assign": "assign",
}
_STARTING = {
    "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "startingoffsets": "startingOffsets",
}
_ENDING = {
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "endingoffsets": "endingOffsets",
}

#: Source options reserved for later work: rejected with a message saying so, never ignored.
KNOWN_OPTION_NAMES: tuple[str, ...] = tuple(
    sorted(
        [
            *_SUBSCRIPTIONS.values(),
            *_STARTING.values(),
            *_ENDING.values(),
            *(o.name for o in _OPTIONS.values()),
            "kafka.*",
        ]
    )
)


def _parse_subscription(key: str, raw: str) -> Subscription:
    name = _SUBSCRIPTIONS[key]
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


def _parse_ending(given: Mapping[str, str], batch: bool) -> EndingPosition | None:
    present = [_ENDING[k] for k in _ENDING if k in given]
    if len(present) > 1:
        logger.warning(
            "options %s are all set; %s takes precedence (as in Spark)",
            ", ".join(present),
            present[0],
        )
    if "endingtimestamp" in given:
        return TimestampEnd(parse_non_negative("endingTimestamp", given["endingtimestamp"]))
    if "endingoffsetsbytimestamp" in given:
        return PartitionTimestampsEnd(
            parse_partition_timestamps(
                given["endingoffsetsbytimestamp"], "option 'endingOffsetsByTimestamp'"
            )
        )
    raw = given.get("endingoffsets")
    if raw is None:
        return LatestEnd() if batch else None
    if raw.strip().lower() == "latest":
        return LatestEnd()
    if raw.strip().lower() == "earliest":
        raise OptionError("option 'endingOffsets' cannot be 'earliest' (the end is exclusive)")
    if not raw.strip().startswith("{"):
        raise OffsetFormatError(
            f"option 'endingOffsets' must be 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -1}}}}, got {raw!r}'
        )
    positions = parse_starting_offsets(raw, "option 'endingOffsets'")
    early = [tp for tp, p in positions.items() if p is Boundary.EARLIEST]
    if early:
        raise OptionError(
            f"option 'endingOffsets': -2 (earliest) is not a valid end, for "
            f"{format_partitions(early)}"
        )
    return OffsetsEnd(positions)


def _check_batch_start(start: StartingPosition) -> None:
    """Spark's batch queries refuse a ``latest`` start (nothing would be read)."""
    if isinstance(start, LatestStart):
        raise OptionError("option 'startingOffsets' cannot be 'latest' in a batch query")
    if isinstance(start, OffsetsStart):
        late = [tp for tp, p in start.positions.items() if p is Boundary.LATEST]
        if late:
            raise OptionError(
                f"option 'startingOffsets': -1 (latest) is not valid in a batch query, for "
                f"{format_partitions(late)}"
            )


def _parse_starting(given: Mapping[str, str], batch: bool = False) -> StartingPosition:
    present = [_STARTING[k] for k in _STARTING if k in given]
    if len(present) > 1:
        logger.warning(
            "options %s are all set; %s takes precedence (as in Spark)",
            ", ".join(present),
            present[0],
        )
    if "startingtimestamp" in given:
        return TimestampStart(parse_non_negative("startingTimestamp", given["startingtimestamp"]))
    if "startingoffsetsbytimestamp" in given:
        return PartitionTimestampsStart(
            parse_partition_timestamps(given["startingoffsetsbytimestamp"])
        )
    raw = given.get("startingoffsets")
    if raw is None:
        return EarliestStart() if batch else LatestStart()
    if raw.strip().lower() == "latest":
        return LatestStart()
    if raw.strip().lower() == "earliest":
        return EarliestStart()
    if not raw.strip().startswith("{"):
        raise OffsetFormatError(
            f"option 'startingOffsets' must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}'
        )
    return OffsetsStart(parse_starting_offsets(raw))


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
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    target_batch_duration_ms: int | None = None
    """Size batches so they take about this long (:mod:`unaligned.source.batch_sizing`)."""
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000

    @classmethod
    def parse(cls, options: Mapping[str, str], batch: bool = False) -> SourceOptions:
        """Validate Spark Kafka source options (any key case). Raises :class:`OptionError`.

        ``batch``: a ``spark.read`` query (Spark's batch defaults and checks)."""
        given, spelled = _lower_keys(options)

        chosen = [k for k in _SUBSCRIPTIONS if k in given]
        if len(chosen) != 1:
            names = ", ".join(_SUBSCRIPTIONS.values())
            verb = "One" if not chosen else "Only one"
            got = f" (got {', '.join(_SUBSCRIPTIONS[k] for k in chosen)})" if chosen else ""
            raise OptionError(
                f"{verb} of the options {names} must be specified for the Kafka source{got}"
            )
        subscription = _parse_subscription(chosen[0], given[chosen[0]])

        kafka = client_config_from_options(kafka_params(given))

        values: dict[str, Any] = {}
        for key, raw in given.items():
            if (
                key in _SUBSCRIPTIONS
                or key in _STARTING
                or key in _ENDING
                or key.startswith(KAFKA_PREFIX)
            ):
                continue
            option = _OPTIONS.get(key)
            if option is None:
                raise OptionError(
                    f"unknown option '{spelled[key]}' for the unaligned Kafka source; "
                    "known options: " + ", ".join(KNOWN_OPTION_NAMES)
                )
            value = option.parse(option.name, raw)
            if option.field is not None:
                values[option.field] = value

        starting = _parse_starting(given, batch)
        if batch:
            _check_batch_start(starting)
        parsed = cls(
            subscription=subscription,
            kafka=kafka,
            starting=starting,
            ending=_parse_ending(given, batch),
            **values,
        )
        parsed._check_consistency()
        return parsed

    def _check_consistency(self) -> None:
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
