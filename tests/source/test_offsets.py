"""The checkpointed source offset JSON (with the query start) and the offsets JSON options."""

from __future__ import annotations

import json

import pytest

from unaligned.errors import OffsetFormatError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offset_options import (
    Boundary,
    parse_assign,
    parse_partition_timestamps,
    parse_starting_offsets,
)
from unaligned.source.offsets import KafkaSourceOffset

A0, A1, A2, B0 = (
    TopicPartitionId("a", 0),
    TopicPartitionId("a", 1),
    TopicPartitionId("a", 2),
    TopicPartitionId("b", 0),
)


# --- KafkaSourceOffset ---------------------------------------------------------------------------


def test_source_offset_json_has_the_documented_shape() -> None:
    offset = KafkaSourceOffset({TopicPartitionId("topic", 1): 40, TopicPartitionId("topic", 0): 23})
    assert offset.to_json() == {"offsets": {"topic": {"0": 23, "1": 40}}, "idleBarrier": 0}


def test_source_offset_round_trips_through_json_text() -> None:
    offset = KafkaSourceOffset(
        {A0: 5, A1: 0, TopicPartitionId("a", 10): 7, B0: 2**40}, idle_barrier=3
    )
    text = json.dumps(offset.to_json())
    assert KafkaSourceOffset.from_json(json.loads(text), "x") == offset
    assert KafkaSourceOffset.from_json(text, "x") == offset


def test_the_read_task_count_is_recorded_once_and_carried_to_every_later_offset() -> None:
    start = KafkaSourceOffset.initial({A0: 0, A1: 0}, "tok", read_tasks=3)
    assert start.to_json()["readTasks"] == 3
    later = start.next({A0: 5, A1: 5}, 0).next({A0: 9, A1: 9}, 1)
    assert later.read_tasks == 3
    assert KafkaSourceOffset.from_json(json.dumps(later.to_json()), "x") == later
    # offsets written before the count was recorded: one task per topic-partition
    assert KafkaSourceOffset.from_json({"offsets": {}, "idleBarrier": 0}, "x").read_tasks is None
    with pytest.raises(OffsetFormatError, match="readTasks"):
        KafkaSourceOffset.from_json({"offsets": {}, "idleBarrier": 0, "readTasks": 0}, "x")


def test_topic_ids_round_trip_and_are_carried_to_the_next_offset() -> None:
    offset = KafkaSourceOffset({A0: 5}, topic_ids={"a": "AAAAAAAAAAAAAAAAAAAAAA"})
    assert offset.to_json()["topicIds"] == {"a": "AAAAAAAAAAAAAAAAAAAAAA"}
    assert KafkaSourceOffset.from_json(offset.to_json(), "x") == offset
    assert offset.next({A0: 9}, 0).topic_ids == {"a": "AAAAAAAAAAAAAAAAAAAAAA"}
    assert "topicIds" not in KafkaSourceOffset({A0: 5}).to_json()  # as earlier versions wrote
    with pytest.raises(OffsetFormatError, match="topicIds must map topic names to ids"):
        KafkaSourceOffset.from_json({**offset.to_json(), "topicIds": {"a": 1}}, "x")


def test_source_offset_json_is_deterministic_with_numeric_partition_order() -> None:
    a = KafkaSourceOffset({TopicPartitionId("t", 10): 1, TopicPartitionId("t", 2): 1, B0: 1})
    b = KafkaSourceOffset({B0: 1, TopicPartitionId("t", 2): 1, TopicPartitionId("t", 10): 1})
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert list(a.to_json()["offsets"]["t"]) == ["2", "10"]
    assert list(a.to_json()["offsets"]) == ["b", "t"]


def test_the_query_start_is_recorded_by_the_initial_offset_and_the_first_batch_only() -> None:
    initial = KafkaSourceOffset.initial({A0: 5, A1: 7}, "tok")
    assert initial.to_json()["queryStart"] == {"a": {"0": 5, "1": 7}}
    first_end = initial.next({A0: 9, A1: 7}, 0)
    assert first_end.query_start == {A0: 5, A1: 7} and first_end.barrier_token == "tok"
    assert KafkaSourceOffset.from_json(json.dumps(first_end.to_json()), "x") == first_end
    second_end = first_end.next({A0: 12, A1: 8}, 0)
    assert second_end.query_start is None and "queryStart" not in second_end.to_json()
    idle = initial.next(initial.positions, 1)  # an idle barrier before any record: still batch 0
    assert idle.query_start == {A0: 5, A1: 7}


def test_a_rerun_first_batch_starts_at_the_recorded_query_start() -> None:
    first_end = KafkaSourceOffset.initial({A0: 5}, "tok").next({A0: 9}, 0)
    re_resolved = KafkaSourceOffset.initial(
        {A0: 30}, "new"
    )  # initialOffset() again after a restart
    assert first_end.batch_start(re_resolved).positions == {A0: 5}
    same = KafkaSourceOffset.initial({A0: 5}, "tok")
    assert first_end.batch_start(same) is same
    later = KafkaSourceOffset({A0: 9}, 0, "tok")
    assert later.next({A0: 11}, 0).batch_start(later) is later  # no query start: as passed
    assert first_end.batch_start(first_end) is first_end  # an empty plan stays empty


def test_empty_source_offset_round_trips() -> None:
    assert (
        KafkaSourceOffset.from_json({"offsets": {}, "idleBarrier": 0}, "x") == KafkaSourceOffset()
    )


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        "[]",
        {"offsets": {"t": {"0": 1}}},
        {"offsets": {"t": {"0": 1}}, "idleBarrier": 0, "extra": 1},
        {"offsets": {"t": {"0": 1}}, "idleBarrier": 0, "queryStart": [1]},
        {"offsets": {"t": {"0": 1}}, "idleBarrier": 0, "queryStart": {"t": {"0": -3}}},
        {"offsets": {"t": {"0": -1}}, "idleBarrier": 0},
        {"offsets": {"t": {"x": 1}}, "idleBarrier": 0},
        {"offsets": {"t": {"0": "1"}}, "idleBarrier": 0},
        {"offsets": {"t": {"0": 1.5}}, "idleBarrier": 0},
        {"offsets": {"t": [1]}, "idleBarrier": 0},
        {"offsets": {"t": {"0": 1}}, "idleBarrier": -1},
        {"offsets": {"t": {"0": True}}, "idleBarrier": 0},
        {"t": {"0": 1}},
    ],
)
def test_malformed_checkpointed_offset_raises_offset_format_error_naming_it(bad: object) -> None:
    with pytest.raises(OffsetFormatError, match="the end offset from the log"):
        KafkaSourceOffset.from_json(bad, "the end offset from the log")


# --- option JSON ------------------------------------------------------------------------------


def test_parse_assign_sorts_and_dedupes() -> None:
    assert parse_assign('{"b": [0], "a": [2, 0, 2]}') == (A0, A2, B0)


@pytest.mark.parametrize(
    "bad", ['{"a": 1}', '{"a": ["0"]}', '{"a": [-1]}', "{}", '{"a": []}', "[1]", "{"]
)
def test_parse_assign_rejects_malformed_json(bad: str) -> None:
    with pytest.raises(OffsetFormatError, match="assign"):
        parse_assign(bad)


def test_parse_starting_offsets_maps_minus_two_and_minus_one() -> None:
    parsed = parse_starting_offsets('{"a": {"0": 23, "1": -2, "2": -1}}')
    assert parsed == {A0: 23, A1: Boundary.EARLIEST, A2: Boundary.LATEST}


@pytest.mark.parametrize(
    "bad",
    [
        '{"a": {"0": -3}}',
        '{"a": {"0": "5"}}',
        '{"a": {"p": 5}}',
        '{"a": 5}',
        '{"a": {"01": 5}}',
        "latest-ish",
    ],
)
def test_parse_starting_offsets_rejects_malformed_values(bad: str) -> None:
    with pytest.raises(OffsetFormatError, match="startingOffsets"):
        parse_starting_offsets(bad)


def test_parse_partition_timestamps_rejects_negative_times() -> None:
    assert parse_partition_timestamps('{"a": {"0": 1000}}') == {A0: 1000}
    with pytest.raises(OffsetFormatError, match="startingOffsetsByTimestamp"):
        parse_partition_timestamps('{"a": {"0": -1}}')


# --- bounded input: ending, finished, endOfData -------------------------------------------------


def test_a_bounded_offset_round_trips_and_says_which_partitions_are_finished() -> None:
    a0, a1, b0 = (
        TopicPartitionId("a", 0),
        TopicPartitionId("a", 1),
        TopicPartitionId("b", 0),
    )
    offset = KafkaSourceOffset({a0: 10, a1: 3, b0: 7}, 0, "tok", None, {a0: 10, a1: 9, b0: 7})
    as_json = offset.to_json()
    assert as_json["ending"] == {"a": {"0": 10, "1": 9}, "b": {"0": 7}}
    assert as_json["finished"] == {"a": [0], "b": [0]}
    assert "endOfData" not in as_json
    assert KafkaSourceOffset.from_json(json.dumps(as_json), "x") == offset
    done = offset.next({a0: 10, a1: 9, b0: 7}, 0)
    assert done.ending == offset.ending
    assert done.to_json()["endOfData"] is True and done.end_of_data()
    assert KafkaSourceOffset.from_json(done.to_json(), "x") == done


def test_an_unbounded_offset_has_no_bounded_keys() -> None:
    as_json = KafkaSourceOffset({TopicPartitionId("a", 0): 1}, 0, "tok").to_json()
    assert not {"ending", "finished", "endOfData"} & set(as_json)
    assert not KafkaSourceOffset.from_json(as_json, "x").end_of_data()


def test_end_of_data_without_ending_is_rejected() -> None:
    with pytest.raises(OffsetFormatError, match="without ending"):
        KafkaSourceOffset.from_json({"offsets": {}, "idleBarrier": 0, "endOfData": True}, "x")
    with pytest.raises(OffsetFormatError, match="without ending"):
        KafkaSourceOffset.from_json({"offsets": {}, "idleBarrier": 0, "drained": True}, "x")
    for key in ("endOfData", "drained"):
        with pytest.raises(
            OffsetFormatError, match="endOfData, drained, layoutDrain and splitRanges must be"
        ):
            KafkaSourceOffset.from_json(
                {"offsets": {}, "idleBarrier": 0, "ending": {}, key: "yes"}, "x"
            )


def test_a_drained_offset_round_trips_and_its_next_offsets_stay_drained() -> None:
    tp = TopicPartitionId("a", 0)
    drained = KafkaSourceOffset({tp: 5}, 0, "tok", None, {tp: 9}, drained=True)
    as_json = drained.to_json()
    assert as_json["drained"] is True and "endOfData" not in as_json
    assert KafkaSourceOffset.from_json(as_json, "x") == drained
    done = drained.next({tp: 9}, 0)
    assert done.drained and done.to_json()["endOfData"] is True


def test_the_initial_offset_carries_the_ending_and_a_rerun_first_batch_keeps_it() -> None:
    tp = TopicPartitionId("a", 0)
    first = KafkaSourceOffset.initial({tp: 5}, "tok", {tp: 20})
    end = first.next({tp: 20}, 0)
    assert end.query_start == {tp: 5} and end.ending == {tp: 20}
    re_resolved = KafkaSourceOffset.initial({tp: 8}, "tok", {tp: 30})
    begin = end.batch_start(re_resolved)
    assert begin.positions == {tp: 5} and begin.ending == {tp: 20}


def test_a_layout_drain_offset_round_trips_and_its_next_offset_is_no_drain() -> None:
    drain = KafkaSourceOffset({A0: 5}, 1, "tok", read_tasks=2, layout_drain=True)
    text = drain.to_json()
    assert text["layoutDrain"] is True and text["readTasks"] == 2
    assert KafkaSourceOffset.from_json(text, "x") == drain
    following = drain.next({A0: 9}, 1, read_tasks=4)
    assert not following.layout_drain and following.read_tasks == 4
    assert "layoutDrain" not in following.to_json()
    with pytest.raises(
        OffsetFormatError, match="layoutDrain and splitRanges must be true or false"
    ):
        KafkaSourceOffset.from_json({**text, "layoutDrain": 1}, "x")
