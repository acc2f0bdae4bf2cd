"""The offsets JSON of the source's options, as Spark's Kafka source takes them.

``assign`` (``{"topic": [0, 1]}``), ``startingOffsets`` / ``endingOffsets``
(``{"topic": {"0": 23, "1": -2}}`` with ``-2`` for earliest and ``-1`` for latest; every offset a
*next offset to read* position) and ``startingOffsetsByTimestamp`` (milliseconds per partition).
Malformed JSON raises :class:`~unaligned.errors.OffsetFormatError` naming the option. The
checkpointed source offset is :mod:`unaligned.source.offsets`; which option wins over which is
:mod:`unaligned.source.position_options`.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from unaligned.errors import OffsetFormatError
from unaligned.kafka.partitions import TopicPartitionId


class Boundary(Enum):
    """A position resolved against the broker when the query starts (Spark's -2 / -1)."""

    EARLIEST = -2
    LATEST = -1


PartitionPosition = int | Boundary


# --- JSON options ----------------------------------------------------------------------------


def _load_json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise OffsetFormatError(f"{what} is not valid JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise OffsetFormatError(f"{what} must be a JSON object keyed by topic, got: {text!r}")
    return value


def partition_number(raw: object, what: str, topic: str) -> int:
    if isinstance(raw, bool):
        raise OffsetFormatError(f"{what}: partition {raw!r} of topic {topic!r} is not a number")
    try:
        number: int = int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise OffsetFormatError(
            f"{what}: partition {raw!r} of topic {topic!r} is not a number"
        ) from None
    if number < 0 or (isinstance(raw, str) and raw.strip() != str(number)):
        raise OffsetFormatError(f"{what}: partition {raw!r} of topic {topic!r} is not valid")
    return number


def whole_number(raw: object, what: str, tp: TopicPartitionId) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise OffsetFormatError(f"{what}: the value for {tp} must be a whole number, got {raw!r}")
    return raw


def parse_assign(text: str, what: str = "option 'assign'") -> tuple[TopicPartitionId, ...]:
    """``{"topicA": [0, 1], "topicB": [2]}`` -> sorted topic-partitions."""
    obj = _load_json_object(text, what)
    tps: set[TopicPartitionId] = set()
    for topic, partitions in obj.items():
        if not topic:
            raise OffsetFormatError(f"{what}: empty topic name")
        if not isinstance(partitions, list):
            raise OffsetFormatError(
                f"{what}: topic {topic!r} must map to a list of partition numbers, "
                f"got {partitions!r}"
            )
        for raw in partitions:
            if not isinstance(raw, int) or isinstance(raw, bool):
                raise OffsetFormatError(
                    f"{what}: partition {raw!r} of topic {topic!r} is not a number"
                )
            tps.add(TopicPartitionId(topic, partition_number(raw, what, topic)))
    if not tps:
        raise OffsetFormatError(f"{what} names no topic-partitions: {text!r}")
    return tuple(sorted(tps))


def parse_partition_values(text: str, what: str) -> dict[TopicPartitionId, int]:
    """``{"topic": {"0": 23, "1": -1}}`` -> ``{TopicPartitionId: int}`` (values as written)."""
    obj = _load_json_object(text, what)
    values: dict[TopicPartitionId, int] = {}
    for topic, per_partition in obj.items():
        if not topic:
            raise OffsetFormatError(f"{what}: empty topic name")
        if not isinstance(per_partition, dict):
            raise OffsetFormatError(
                f"{what}: topic {topic!r} must map to an object of partition -> value, "
                f"got {per_partition!r}"
            )
        for raw_partition, raw_value in per_partition.items():
            tp = TopicPartitionId(topic, partition_number(raw_partition, what, topic))
            values[tp] = whole_number(raw_value, what, tp)
    if not values:
        raise OffsetFormatError(f"{what} names no topic-partitions: {text!r}")
    return values


def parse_starting_offsets(
    text: str, what: str = "option 'startingOffsets'"
) -> dict[TopicPartitionId, PartitionPosition]:
    """Spark's per-partition ``startingOffsets``: an offset >= 0, -2 (earliest) or -1 (latest)."""
    positions: dict[TopicPartitionId, PartitionPosition] = {}
    for tp, value in parse_partition_values(text, what).items():
        if value == Boundary.EARLIEST.value:
            positions[tp] = Boundary.EARLIEST
        elif value == Boundary.LATEST.value:
            positions[tp] = Boundary.LATEST
        elif value >= 0:
            positions[tp] = value
        else:
            raise OffsetFormatError(
                f"{what}: offset {value} for {tp} is invalid (use an offset >= 0, -2 for earliest, "
                "-1 for latest)"
            )
    return positions


def parse_partition_timestamps(
    text: str, what: str = "option 'startingOffsetsByTimestamp'"
) -> dict[TopicPartitionId, int]:
    """Milliseconds since the epoch per partition (``>= 0``)."""
    timestamps = parse_partition_values(text, what)
    for tp, ts in timestamps.items():
        if ts < 0:
            raise OffsetFormatError(f"{what}: timestamp {ts} for {tp} must be >= 0 (milliseconds)")
    return timestamps
