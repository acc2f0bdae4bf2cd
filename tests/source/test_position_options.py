"""Starting and ending position options: Spark's forms, precedence, batch defaults, and every
rejection naming the option (:mod:`unaligned.source.position_options`, via SourceOptions.parse)."""

from __future__ import annotations

from typing import Any

import pytest

from unaligned.errors import OffsetFormatError, OptionError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offset_options import Boundary
from unaligned.source.options import SourceOptions
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

BASE = {"subscribe": "events", "kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(**extra: Any) -> SourceOptions:
    options = dict(BASE)
    options.update({k.replace("__", "."): v for k, v in extra.items()})
    return SourceOptions.parse(options)


# --- starting position ----------------------------------------------------------------------


def test_starting_offsets_forms() -> None:
    assert parse(startingOffsets="latest").starting == LatestStart()
    assert parse(startingOffsets=" Earliest ").starting == EarliestStart()
    assert parse(startingOffsets='{"events": {"0": 5, "1": -2}}').starting == OffsetsStart(
        {TopicPartitionId("events", 0): 5, TopicPartitionId("events", 1): Boundary.EARLIEST}
    )
    assert parse(startingTimestamp="1700000000000").starting == TimestampStart(1700000000000)
    assert parse(
        startingOffsetsByTimestamp='{"events": {"0": 1000}}'
    ).starting == PartitionTimestampsStart({TopicPartitionId("events", 0): 1000})
    assert (
        parse(startingOffsetsByTimestampStrategy="LATEST").no_match_strategy
        is NoMatchStrategy.LATEST
    )


def test_starting_precedence_is_sparks() -> None:
    both = parse(
        startingTimestamp="5",
        startingOffsetsByTimestamp='{"e": {"0": 1}}',
        startingOffsets="earliest",
    )
    assert both.starting == TimestampStart(5)
    assert parse(
        startingOffsetsByTimestamp='{"e": {"0": 1}}', startingOffsets="earliest"
    ).starting == (PartitionTimestampsStart({TopicPartitionId("e", 0): 1}))


@pytest.mark.parametrize(
    "key, value",
    [
        ("startingOffsets", "beginning"),
        ("startingOffsets", '{"events": {"0": -7}}'),
        ("startingOffsets", '{"events": [0]}'),
        ("startingOffsets", "{not json"),
        ("startingOffsetsByTimestamp", '{"events": {"0": "soon"}}'),
    ],
)
def test_malformed_starting_offsets_raise_offset_format_error_naming_the_option(
    key: str, value: str
) -> None:
    with pytest.raises(OffsetFormatError, match=key):
        parse(**{key: value})


def test_starting_timestamp_must_be_a_number() -> None:
    with pytest.raises(OptionError, match="startingTimestamp"):
        parse(startingTimestamp="yesterday")


# --- ending position (bounded input) ---------------------------------------------------------


def test_streaming_queries_are_unbounded_unless_an_ending_option_is_given() -> None:
    assert parse().ending is None
    assert parse(endingOffsets="latest").ending == LatestEnd()
    assert parse(ENDINGOFFSETS="LATEST").ending == LatestEnd()


def test_ending_offsets_json_takes_offsets_and_latest_but_not_earliest() -> None:
    t0, t1 = TopicPartitionId("events", 0), TopicPartitionId("events", 1)
    assert parse(endingOffsets='{"events": {"0": 50, "1": -1}}').ending == OffsetsEnd(
        {t0: 50, t1: Boundary.LATEST}
    )
    with pytest.raises(OptionError, match="'endingOffsets': -2 .*events-1"):
        parse(endingOffsets='{"events": {"0": 50, "1": -2}}')
    with pytest.raises(OptionError, match="'endingOffsets' cannot be 'earliest'"):
        parse(endingOffsets="earliest")
    with pytest.raises(OffsetFormatError, match="endingOffsets"):
        parse(endingOffsets="soon")
    with pytest.raises(OffsetFormatError, match="endingOffsets.*-5"):
        parse(endingOffsets='{"events": {"0": -5}}')


def test_ending_timestamps_take_precedence_as_in_spark() -> None:
    tp = TopicPartitionId("events", 0)
    assert parse(endingTimestamp="1000").ending == TimestampEnd(1000)
    assert parse(endingOffsetsByTimestamp='{"events": {"0": 7}}').ending == (
        PartitionTimestampsEnd({tp: 7})
    )
    both = parse(
        endingTimestamp="5", endingOffsetsByTimestamp='{"events": {"0": 7}}', endingOffsets="latest"
    )
    assert both.ending == TimestampEnd(5)
    with pytest.raises(OptionError, match="endingTimestamp"):
        parse(endingTimestamp="-1")
    with pytest.raises(OffsetFormatError, match="endingOffsetsByTimestamp"):
        parse(endingOffsetsByTimestamp='{"events": {"0": -7}}')


def test_batch_queries_default_to_earliest_latest_and_refuse_what_spark_refuses() -> None:
    batch = SourceOptions.parse(BASE, batch=True)
    assert batch.starting == EarliestStart()
    assert batch.ending == LatestEnd()
    with pytest.raises(OptionError, match="'startingOffsets' cannot be 'latest' in a batch"):
        SourceOptions.parse({**BASE, "startingOffsets": "latest"}, batch=True)
    with pytest.raises(OptionError, match="-1 \\(latest\\) is not valid in a batch"):
        SourceOptions.parse({**BASE, "startingOffsets": '{"events": {"0": -1}}'}, batch=True)
    with pytest.raises(OptionError, match="cannot be 'earliest'"):
        SourceOptions.parse({**BASE, "endingOffsets": "earliest"}, batch=True)
