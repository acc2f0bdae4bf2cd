"""resolve_range against a fake broker lookup: the ends of a bounded query resolved from
timestamps and JSON offsets, and the ends it refuses."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from fake_offset_lookup import TimedLookup
from unaligned.errors import OptionError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.options import SourceOptions
from unaligned.source.planning.position_resolution import resolve_range

TP = TopicPartitionId


def _bounded(ends: Mapping[int, int], **options: str) -> tuple[TimedLookup, SourceOptions]:
    lookup = TimedLookup({"t": len(ends)})
    lookup.ends = {TP("t", p): off for p, off in ends.items()}
    given = {
        "kafka.bootstrap.servers": "broker:9092",
        "subscribe": "t",
        "startingOffsets": "earliest",
        "fetchOffset.retryIntervalMs": "0",
        **options,
    }
    return lookup, SourceOptions.parse(given)


def _ending(lookup: TimedLookup, options: SourceOptions) -> dict[TopicPartitionId, int] | None:
    return resolve_range(options, lookup)[1]  # type: ignore[arg-type]


def test_ending_timestamps_take_the_first_offset_at_or_after_and_latest_when_none() -> None:
    lookup, options = _bounded({0: 40, 1: 40}, endingTimestamp="1000")
    lookup.times = {(TP("t", 0), 1000): 12, (TP("t", 1), 1000): None}
    assert _ending(lookup, options) == {TP("t", 0): 12, TP("t", 1): 40}
    lookup2, by_partition = _bounded(
        {0: 40, 1: 40}, endingOffsetsByTimestamp='{"t": {"0": 5, "1": 7}}'
    )
    lookup2.times = {(TP("t", 0), 5): 3, (TP("t", 1), 7): 8}
    assert _ending(lookup2, by_partition) == {TP("t", 0): 3, TP("t", 1): 8}


def test_ending_offsets_must_name_every_partition_and_not_be_below_the_start() -> None:
    lookup, options = _bounded({0: 40, 1: 40}, endingOffsets='{"t": {"0": 5}}')
    with pytest.raises(OptionError, match="endingOffsets.*every partition"):
        _ending(lookup, options)
    lookup, options = _bounded(
        {0: 40}, startingOffsets='{"t": {"0": 20}}', endingOffsets='{"t": {"0": 5}}'
    )
    with pytest.raises(OptionError, match="below the starting offset.*t-0: start 20, end 5"):
        _ending(lookup, options)


def test_an_unbounded_query_has_no_ends() -> None:
    lookup, options = _bounded({0: 40})
    assert resolve_range(options, lookup) == ({TP("t", 0): 0}, None)  # type: ignore[arg-type]


def test_a_starting_offset_beyond_the_log_end_says_so() -> None:
    lookup, options = _bounded({0: 108, 1: 40}, startingOffsets='{"t": {"0": 900, "1": 40}}')
    with pytest.raises(OptionError) as raised:
        resolve_range(options, lookup)  # type: ignore[arg-type]
    assert str(raised.value).startswith(
        "option 'startingOffsets' names offsets beyond the end of the log "
        "(t-0: offset 900, log end 108); give an offset at most the log end"
    )
    assert "went back" not in str(raised.value)
    lookup, at_end = _bounded({0: 108}, startingOffsets='{"t": {"0": 108}}')
    assert resolve_range(at_end, lookup)[0] == {TP("t", 0): 108}  # type: ignore[arg-type]
