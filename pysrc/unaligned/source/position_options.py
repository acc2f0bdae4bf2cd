"""Where a query starts and ends: the starting- and ending-position options of the Kafka source.

Parsed from the lower-cased options by :class:`~unaligned.source.options.SourceOptions`
(``SourceOptions.parse``); resolved to offsets against the broker by
:mod:`unaligned.source.planning.position_resolution`. Option names and precedence are Spark's:

- starting position: ``startingTimestamp`` (ms, all partitions) > ``startingOffsetsByTimestamp``
  (JSON of ms per partition) > ``startingOffsets`` (``earliest``, ``latest`` (default) or JSON
  with -2 / -1); ``startingOffsetsByTimestampStrategy`` ``error`` (default) | ``latest`` for
  partitions with no record at or after the timestamp (:class:`NoMatchStrategy`);
- ending position (bounded input): ``endingTimestamp`` (ms, all partitions) >
  ``endingOffsetsByTimestamp`` (JSON of ms per partition) > ``endingOffsets`` (``latest`` or
  JSON with -1 for latest). Ends are exclusive; ``earliest`` / -2 is not an end.

When several options of one kind are set, the first by precedence wins and a warning names the
others. Batch queries default to ``startingOffsets=earliest`` and ``endingOffsets=latest`` and
refuse a ``latest`` start (:func:`check_batch_start`), as Spark does. Malformed values raise
:class:`~unaligned.errors.OptionError` or :class:`~unaligned.errors.OffsetFormatError` naming the
option.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from unaligned.errors import OffsetFormatError, OptionError
from unaligned.kafka.partitions import TopicPartitionId, format_partitions
from unaligned.options.declaration import OptionSpec
from unaligned.options.parsing import parse_choice, parse_non_negative
from unaligned.source.offset_options import (
    Boundary,
    PartitionPosition,
    parse_partition_timestamps,
    parse_starting_offsets,
)

logger = logging.getLogger(__name__)


# --- parsed values -----------------------------------------------------------------------------


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


# --- parsers (lower-case option key -> value) --------------------------------------------------


def parse_no_match(name: str, raw: str) -> NoMatchStrategy:
    """``startingOffsetsByTimestampStrategy`` (a value parser of the options table)."""
    return NoMatchStrategy(parse_choice(name, raw, [s.value for s in NoMatchStrategy]))


#: The starting-position options, by precedence (the first given wins, as in Spark).
STARTING_SPECS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        "startingTimestamp",
        "start every partition at its first offset at or after this time (epoch ms); wins over "
        "`startingOffsetsByTimestamp`, which wins over `startingOffsets` (as in Spark)",
        sets="starting",
    ),
    OptionSpec(
        "startingOffsetsByTimestamp",
        'JSON `{"topic":{"0":1700000000000}}`: a start time (epoch ms) per partition',
        sets="starting",
    ),
    OptionSpec(
        "startingOffsets",
        '`earliest`, `latest`, or JSON `{"topic":{"0":23,"1":-2}}` (-2 earliest, -1 '
        "latest); only a new query reads it, a restart resumes from its checkpoint",
        default_text="`latest` (batch: `earliest`)",
        sets="starting",
    ),
)
#: The ending-position options (bounded input), by precedence.
ENDING_SPECS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        "endingTimestamp",
        "end every partition at its first offset at or after this time (epoch ms), the latest "
        "offset where none is; wins over `endingOffsetsByTimestamp`, which wins over "
        "`endingOffsets`",
        sets="ending",
    ),
    OptionSpec(
        "endingOffsetsByTimestamp",
        "JSON of an end time (epoch ms) per partition",
        sets="ending",
    ),
    OptionSpec(
        "endingOffsets",
        'bounded input, under every trigger: `latest` or JSON `{"topic":{"0":50,"1":-1}}` '
        "(-1 latest); exclusive ends, resolved once when the query first starts and kept in the "
        "checkpoint. The query ends with a final checkpoint once every partition reached its end "
        "(`Trigger.AvailableNow` then stops by itself)",
        default_text="none (batch: `latest`)",
        sets="ending",
    ),
)
#: lower-case key -> Spark's spelling, by precedence.
STARTING_OPTIONS = {s.key: s.name for s in STARTING_SPECS}
ENDING_OPTIONS = {s.key: s.name for s in ENDING_SPECS}


def parse_ending(given: Mapping[str, str], batch: bool) -> EndingPosition | None:
    present = [ENDING_OPTIONS[k] for k in ENDING_OPTIONS if k in given]
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


def check_batch_start(start: StartingPosition) -> None:
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


def parse_starting(given: Mapping[str, str], batch: bool = False) -> StartingPosition:
    present = [STARTING_OPTIONS[k] for k in STARTING_OPTIONS if k in given]
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
