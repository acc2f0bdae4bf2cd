"""Where a new query starts and where a bounded one ends: the position options resolved to offsets.

:func:`resolve_range` turns the parsed starting and ending positions
(:mod:`unaligned.source.position_options`) into the offsets of every partition the query reads
(:mod:`unaligned.source.planning.partition_discovery`), with the broker's earliest / latest offsets
and timestamp lookups. The stream reader calls it once, in ``initialOffset()`` of a new query, and
the offsets carry the result from then on (``queryStart`` and ``ending`` in
:class:`~unaligned.source.offsets.KafkaSourceOffset`), so ``latest`` or a timestamp is never
resolved twice; the batch reader calls it to plan its one range per partition.

Precedence is Spark's: startingTimestamp > startingOffsetsByTimestamp > startingOffsets, and
endingTimestamp > endingOffsetsByTimestamp > endingOffsets. Ends are exclusive. A starting
timestamp no record reaches is an OptionError, or the latest offset with
``startingOffsetsByTimestampStrategy=latest``; an ending timestamp no record reaches ends at the
latest offset (as in Spark). JSON positions must name every partition the query reads; a
``startingOffsets`` offset beyond the log end and an end below the start are OptionErrors.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from unaligned.errors import OptionError
from unaligned.kafka.clients.offset_lookup import OffsetLookup
from unaligned.kafka.partitions import TopicPartitionId, format_partitions
from unaligned.source.offset_options import Boundary
from unaligned.source.options import SourceOptions
from unaligned.source.planning.partition_discovery import discover
from unaligned.source.position_options import (
    EarliestStart,
    LatestEnd,
    LatestStart,
    NoMatchStrategy,
    OffsetsEnd,
    OffsetsStart,
    PartitionTimestampsEnd,
    PartitionTimestampsStart,
    TimestampEnd,
    TimestampStart,
)

logger = logging.getLogger(__name__)


def _resolve_timestamps(
    options: SourceOptions,
    lookup: OffsetLookup,
    timestamps: Mapping[TopicPartitionId, int],
    option: str,
) -> dict[TopicPartitionId, int]:
    found = lookup.offsets_for_times(timestamps)
    unmatched = [tp for tp, off in found.items() if off is None]
    if unmatched and options.no_match_strategy is NoMatchStrategy.ERROR:
        tp = sorted(unmatched)[0]
        raise OptionError(
            f"option '{option}': no record at or after timestamp {timestamps[tp]} in {tp} "
            "(set startingOffsetsByTimestampStrategy=latest to start such partitions at their "
            "latest offset)"
        )
    latest = lookup.latest(unmatched)
    return {tp: latest[tp] if off is None else off for tp, off in found.items()}


def _check_named(
    named: Collection[TopicPartitionId], tps: Collection[TopicPartitionId], option: str
) -> None:
    if set(named) != set(tps):
        raise OptionError(
            f"option '{option}' must name every partition the query reads (-2: earliest, "
            f"-1: latest); named: {format_partitions(named)}; "
            f"partitions: {format_partitions(tps)}"
        )


def resolve_ending(
    options: SourceOptions,
    lookup: OffsetLookup,
    tps: Collection[TopicPartitionId],
    starts: Mapping[TopicPartitionId, int],
) -> dict[TopicPartitionId, int] | None:
    """The exclusive end of every partition of a bounded query (endingTimestamp >
    endingOffsetsByTimestamp > endingOffsets, as in Spark), or None when unbounded. A
    timestamp no record reaches ends at the latest offset (as in Spark). An end below the
    start is an OptionError."""
    end = options.ending
    if end is None:
        return None
    if isinstance(end, LatestEnd):
        ending = lookup.latest(tps)
    elif isinstance(end, OffsetsEnd):
        _check_named(end.positions, tps, "endingOffsets")
        wanted = end.positions
        ending = {tp: p for tp, p in wanted.items() if isinstance(p, int)}
        ending.update(lookup.latest([tp for tp in wanted if wanted[tp] is Boundary.LATEST]))
    else:
        if isinstance(end, TimestampEnd):
            timestamps = {tp: end.timestamp_ms for tp in tps}
        else:
            assert isinstance(end, PartitionTimestampsEnd)
            _check_named(end.timestamps, tps, "endingOffsetsByTimestamp")
            timestamps = dict(end.timestamps)
        found = lookup.offsets_for_times(timestamps)
        latest = lookup.latest([tp for tp, off in found.items() if off is None])
        ending = {tp: latest[tp] if off is None else off for tp, off in found.items()}
    below = sorted(tp for tp in ending if tp in starts and ending[tp] < starts[tp])
    if below:
        detail = ", ".join(f"{tp}: start {starts[tp]}, end {ending[tp]}" for tp in below)
        raise OptionError(f"the ending offset is below the starting offset for {detail}")
    logger.info("ending offsets (exclusive): %s", ending)
    return ending


def _check_within_log(
    positions: Mapping[TopicPartitionId, int],
    lookup: OffsetLookup,
    named: Collection[TopicPartitionId],
) -> None:
    """A ``startingOffsets`` offset beyond its partition's log end is an OptionError saying so
    (read on, it would look like a topic recreated at the first batch)."""
    if not named:
        return
    latest = lookup.latest(named)
    beyond = sorted(tp for tp in named if positions[tp] > latest[tp])
    if beyond:
        detail = "; ".join(f"{tp}: offset {positions[tp]}, log end {latest[tp]}" for tp in beyond)
        raise OptionError(
            f"option 'startingOffsets' names offsets beyond the end of the log ({detail}); "
            "give an offset at most the log end (the next offset to be written), "
            "-1 (latest) or -2 (earliest)"
        )


def resolve_range(
    options: SourceOptions, lookup: OffsetLookup
) -> tuple[dict[TopicPartitionId, int], dict[TopicPartitionId, int] | None]:
    """(starting positions, exclusive ends or None) of every partition the query reads."""
    tps = discover(options, lookup, ())
    start = options.starting
    if isinstance(start, EarliestStart):
        positions = lookup.earliest(tps)
    elif isinstance(start, LatestStart):
        positions = lookup.latest(tps)
    elif isinstance(start, OffsetsStart):
        _check_named(start.positions, tps, "startingOffsets")
        wanted = start.positions
        positions = {tp: p for tp, p in wanted.items() if isinstance(p, int)}
        positions.update(lookup.earliest([tp for tp in wanted if wanted[tp] is Boundary.EARLIEST]))
        positions.update(lookup.latest([tp for tp in wanted if wanted[tp] is Boundary.LATEST]))
        _check_within_log(positions, lookup, [tp for tp in wanted if isinstance(wanted[tp], int)])
    elif isinstance(start, TimestampStart):
        positions = _resolve_timestamps(
            options, lookup, {tp: start.timestamp_ms for tp in tps}, "startingTimestamp"
        )
    else:
        assert isinstance(start, PartitionTimestampsStart)
        _check_named(start.timestamps, tps, "startingOffsetsByTimestamp")
        positions = _resolve_timestamps(
            options, lookup, start.timestamps, "startingOffsetsByTimestamp"
        )
    logger.info("initial offsets: %s", positions)
    return positions, resolve_ending(options, lookup, tps, positions)
