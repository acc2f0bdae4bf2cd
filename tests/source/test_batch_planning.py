"""The source's driver side (:mod:`unaligned.source.planning.batch_planning`), called as Spark
calls it, through the stream reader, against a fake broker lookup: which partitions it plans when a
metadata refresh is flaky, the idle barrier it forces when it resumes an earlier run, bounded
input and Trigger.AvailableNow."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from fake_offset_lookup import FakeLookup, TimedLookup, reader_for
from unaligned.barriers import idle as idle_barriers
from unaligned.barriers.idle import HINT_DIR_ENV, PendingHint
from unaligned.errors import DataLossError, TopicNotFoundError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.stream_reader import KafkaStreamReader

TP = TopicPartitionId


def offset(
    positions: Mapping[str, Mapping[int, int]], idle: int = 0, token: str = "earlierRun"
) -> dict[str, Any]:
    """A checkpointed offset written by an earlier run (token ``earlierRun``)."""
    flat = {TP(t, p): off for t, per in positions.items() for p, off in per.items()}
    return KafkaSourceOffset(flat, idle, token).to_json()


def ranges(planned: Iterable[Any]) -> list[tuple[str, int, int]]:
    return [(str(r.tp), r.start, r.end) for p in planned for r in p.ranges]


def positions(end: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    return dict(end["offsets"])


def through_drain(reader: Any, start: dict[str, Any]) -> dict[str, Any]:
    """The layout drain the reader plans from ``start`` (its partitions changed): nothing
    read, no broker asked; its end offset."""
    drain = reader.latestOffset(start, ReadAllAvailable())
    assert drain["layoutDrain"] is True and positions(drain) == positions(start)
    assert {r.start == r.end for p in reader.partitions(start, drain) for r in p.ranges} == {True}
    return drain


@pytest.fixture(autouse=True)
def hint_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own (empty) idle-barrier hint directory."""
    directory = tmp_path / "hints"
    monkeypatch.setenv(HINT_DIR_ENV, str(directory))
    return directory


# --- a topic deleted and re-created under the same name (another topic id) -------------------


@pytest.mark.parametrize("new_end", [60, 500])  # re-created shorter / grown past the position
def test_a_recreated_topic_stops_the_query_naming_both_ids(new_end: int) -> None:
    lookup, reader = _two_topics_read_to(300)
    lookup.ids = {"a": "idA", "b": "idB1"}
    start = offset({"a": {0: 0}, "b": {0: 0}})
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first["topicIds"] == {"a": "idA", "b": "idB1"}
    reader.partitions(start, first)
    lookup.ids["b"] = "idB2"  # deleted and re-created while the query was stopped
    lookup.ends = {TP("a", 0): 300, TP("b", 0): new_end}
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second["topicIds"] == {"a": "idA", "b": "idB2"}
    with pytest.raises(DataLossError) as raised:
        reader.partitions(first, second)
    message = str(raised.value)
    assert "topic 'b' was deleted and re-created: its topic id was idB1" in message
    assert "(up to offsets {0: 300}) and is idB2 now" in message
    assert "Set failOnDataLoss=false to read the new topic from its earliest offset" in message
    assert "went back" not in message


def test_a_recreated_topic_is_read_from_its_start_without_fail_on_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lookup, reader = _two_topics_read_to(300, failOnDataLoss="false")
    lookup.ids = {"a": "idA", "b": "idB1"}
    first = offset({"a": {0: 300}, "b": {0: 300}})
    first = {**first, "topicIds": {"a": "idA", "b": "idB1"}}
    lookup.ids["b"] = "idB2"
    lookup.ends = {TP("a", 0): 300, TP("b", 0): 500}
    second = reader.latestOffset(first, ReadAllAvailable())
    with caplog.at_level("WARNING"):
        planned = ranges(reader.partitions(first, second))
    assert planned == [("a-0", 300, 300), ("b-0", 0, 500)]  # none of the new topic skipped
    assert "topic 'b' was deleted and re-created" in caplog.text
    third = reader.latestOffset(second, ReadAllAvailable())
    assert third == second  # nothing new: the id is the new one from now on


def test_offsets_without_topic_ids_are_not_compared() -> None:
    lookup, reader = _two_topics_read_to(300)
    start = offset({"a": {0: 100}, "b": {0: 100}})  # an earlier version's offset
    lookup.ids = {"a": "idA", "b": "idB"}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ranges(reader.partitions(start, end)) == [("a-0", 100, 300), ("b-0", 100, 300)]


# --- scenario 7: a metadata refresh that leaves out a known topic ----------------------------


def _two_topics_read_to(offset_: int, **options: str) -> tuple[FakeLookup, KafkaStreamReader]:
    lookup = FakeLookup({"a": 1, "b": 1})
    lookup.ends = {TP("a", 0): offset_, TP("b", 0): offset_}
    return lookup, reader_for(lookup, subscribe="a,b", **options)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_listing_that_leaves_out_a_known_topic_keeps_it_at_its_position(
    fail_on_data_loss: str,
) -> None:
    lookup, reader = _two_topics_read_to(300, failOnDataLoss=fail_on_data_loss)
    start = offset({"a": {0: 0}, "b": {0: 0}})
    first = reader.latestOffset(start, ReadAllAvailable())
    assert ranges(reader.partitions(start, first)) == [("a-0", 0, 300), ("b-0", 0, 300)]

    lookup.ends = {TP("a", 0): 600, TP("b", 0): 600}
    lookup.flake_next_listing(topics=["b"])  # one refresh without b; b still exists
    second = reader.latestOffset(first, ReadAllAvailable())
    assert positions(second) == {"a": {"0": 600}, "b": {"0": 600}}
    assert lookup.confirmed == [["b"]]  # confirmed with a direct request, not dropped
    assert ranges(reader.partitions(first, second)) == [("a-0", 300, 600), ("b-0", 300, 600)]

    lookup.ends = {TP("a", 0): 900, TP("b", 0): 900}
    third = reader.latestOffset(second, ReadAllAvailable())
    # b goes on from where it was: never back to its earliest offset (no duplicates).
    assert ranges(reader.partitions(second, third)) == [("a-0", 600, 900), ("b-0", 600, 900)]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_listing_that_leaves_out_a_topic_while_planning_plans_its_full_range(
    fail_on_data_loss: str,
) -> None:
    # The same logged batch is planned again after a restart: a flaky listing at planning time
    # must neither stop the query nor plan the partition as an empty (skipped) range.
    lookup, reader = _two_topics_read_to(300, failOnDataLoss=fail_on_data_loss)
    start = offset({"a": {0: 100}, "b": {0: 100}})
    end = reader.latestOffset(start, ReadAllAvailable())
    lookup.flake_next_listing(topics=["b"])
    assert ranges(reader.partitions(start, end)) == [("a-0", 100, 300), ("b-0", 100, 300)]
    lookup.flake_next_listing(partitions=[TP("b", 0)])
    assert ranges(reader.partitions(start, end)) == [("a-0", 100, 300), ("b-0", 100, 300)]


def test_a_topic_the_broker_confirms_deleted_stops_the_query_with_fail_on_data_loss() -> None:
    lookup, reader = _two_topics_read_to(300)
    start = offset({"a": {0: 100}, "b": {0: 100}})
    lookup.delete("b")
    drain = through_drain(reader, start)
    end = reader.latestOffset(drain, ReadAllAvailable())
    assert positions(end) == {"a": {"0": 300}}
    assert lookup.confirmed == [["b"], ["b"]]
    with pytest.raises(DataLossError, match=r"b-0 from offset 100"):
        reader.partitions(drain, end)


def test_a_topic_the_broker_confirms_deleted_is_dropped_without_fail_on_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lookup, reader = _two_topics_read_to(300, failOnDataLoss="false")
    start = offset({"a": {0: 100}, "b": {0: 100}})
    end = reader.latestOffset(start, ReadAllAvailable())
    lookup.delete("b")  # deleted after the batch was planned: planning finds it gone
    with caplog.at_level("WARNING"):
        assert ranges(reader.partitions(start, end)) == [("a-0", 100, 300), ("b-0", 300, 300)]
    assert any("b-0" in r.getMessage() and "disappeared" in r.getMessage() for r in caplog.records)
    following = reader.latestOffset(through_drain(reader, end), ReadAllAvailable())
    assert positions(following) == {"a": {"0": 300}}


def test_a_partition_a_listing_leaves_out_is_kept_unless_its_topic_lacks_it() -> None:
    lookup = FakeLookup({"b": 2})
    lookup.ends = {TP("b", 0): 50, TP("b", 1): 50}
    reader = reader_for(lookup, subscribe="b")
    start = offset({"b": {0: 10, 1: 10}})
    lookup.flake_next_listing(partitions=[TP("b", 1)])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert positions(end) == {"b": {"0": 50, "1": 50}}

    lookup.partitions["b"] = [0]  # recreated with one partition: b-1 is really gone
    lookup.ends = {TP("b", 0): 60}
    drain = through_drain(reader, end)
    following = reader.latestOffset(drain, ReadAllAvailable())
    assert positions(following) == {"b": {"0": 60}}
    with pytest.raises(DataLossError, match="b-1"):
        reader.partitions(drain, following)


def test_no_clear_answer_from_the_broker_keeps_the_topic() -> None:
    lookup, reader = _two_topics_read_to(300)
    lookup.unclear = {"b"}  # e.g. LEADER_NOT_AVAILABLE or not authorized
    start = offset({"a": {0: 100}, "b": {0: 100}})
    lookup.flake_next_listing(topics=["b"])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert positions(end) == {"a": {"0": 300}, "b": {"0": 300}}


@pytest.mark.parametrize(
    "subscription",
    [{"subscribePattern": "^[ab]$"}, {"assign": '{"a": [0], "b": [0]}'}],
    ids=["subscribePattern", "assign"],
)
def test_every_subscription_kind_keeps_a_known_topic_a_listing_leaves_out(
    subscription: dict[str, str],
) -> None:
    lookup = FakeLookup({"a": 1, "b": 1})
    lookup.ends = {TP("a", 0): 300, TP("b", 0): 300}
    reader = reader_for(lookup, **subscription)
    start = offset({"a": {0: 100}, "b": {0: 100}})
    lookup.flake_next_listing(topics=["b"])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert positions(end) == {"a": {"0": 300}, "b": {"0": 300}}
    assert ranges(reader.partitions(start, end)) == [("a-0", 100, 300), ("b-0", 100, 300)]


@pytest.mark.parametrize(
    "subscription",
    [{"subscribe": "a,b"}, {"subscribePattern": "^[ab]$"}],
    ids=["subscribe", "subscribePattern"],
)
def test_available_now_target_keeps_a_known_topic_its_listing_left_out(
    subscription: dict[str, str],
) -> None:
    lookup = FakeLookup({"a": 1, "b": 1})
    lookup.ends = {TP("a", 0): 300, TP("b", 0): 300}
    reader = reader_for(lookup, **subscription, **{"fetchOffset.numRetries": "1"})
    lookup.flake_next_listing(topics=["b"])
    reader.prepareForTriggerAvailableNow()  # the target is fixed from a listing without b
    start = offset({"a": {0: 100}, "b": {0: 100}})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert positions(end) == {"a": {"0": 300}, "b": {"0": 300}}
    lookup.ends = {TP("a", 0): 400, TP("b", 0): 400}  # after the target: not read
    assert reader.latestOffset(end, ReadAllAvailable()) is end
    assert lookup.confirmed == [["b"]]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_available_now_target_drops_a_topic_the_broker_confirms_deleted(
    fail_on_data_loss: str,
) -> None:
    lookup, reader = _two_topics_read_to(300, failOnDataLoss=fail_on_data_loss)
    lookup.delete("b")
    reader.prepareForTriggerAvailableNow()  # b is not found here: no error before the start
    start = offset({"a": {0: 100}, "b": {0: 100}})
    drain = through_drain(reader, start)
    end = reader.latestOffset(drain, ReadAllAvailable())
    assert positions(end) == {"a": {"0": 300}}
    if fail_on_data_loss == "true":
        with pytest.raises(DataLossError, match=r"b-0 from offset 100"):
            reader.partitions(drain, end)
    else:
        assert ranges(reader.partitions(drain, end)) == [("a-0", 100, 300)]


def test_a_topic_no_longer_subscribed_is_not_looked_up() -> None:
    lookup = FakeLookup({"a": 1})
    lookup.ends = {TP("a", 0): 300}
    reader = reader_for(lookup, subscribe="a")
    start = offset({"a": {0: 100}, "old": {0: 5}})
    end = reader.latestOffset(through_drain(reader, start), ReadAllAvailable())
    assert positions(end) == {"a": {"0": 300}}
    assert lookup.confirmed == []


def test_a_subscribed_topic_never_read_that_does_not_exist_is_not_found() -> None:
    lookup = FakeLookup({"a": 1})
    reader = reader_for(lookup, subscribe="a,missing", **{"fetchOffset.numRetries": "2"})
    reader.prepareForTriggerAvailableNow()  # before initialOffset: not an error yet
    with pytest.raises(TopicNotFoundError, match="missing"):
        reader.initialOffset()
    assert lookup.listings == 4
    streaming = reader_for(lookup, subscribe="a,missing", **{"fetchOffset.numRetries": "2"})
    with pytest.raises(TopicNotFoundError, match="missing"):
        streaming.latestOffset(offset({"a": {0: 0}}), ReadAllAvailable())


# --- scenario 8: the first barrier of a resumed run ------------------------------------------


def _quiet_topic(at: int = 120) -> tuple[FakeLookup, KafkaStreamReader]:
    lookup = FakeLookup({"a": 2})
    lookup.ends = {TP("a", 0): at, TP("a", 1): at}
    return lookup, reader_for(lookup, subscribe="a")


def test_a_reader_resuming_an_earlier_run_forces_one_idle_barrier_on_a_quiet_topic() -> None:
    # The hint the earlier run left is on another host's disk: this one has none.
    _, reader = _quiet_topic()
    start = offset({"a": {0: 120, 1: 120}}, idle=3)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {**start, "idleBarrier": 4}  # same positions, same token, one more barrier
    assert ranges(reader.partitions(start, end)) == [("a-0", 120, 120), ("a-1", 120, 120)]
    # That barrier's commit published no hint (nothing left pending): no further batch.
    assert reader.latestOffset(end, ReadAllAvailable()) is end


def test_the_resumed_run_barrier_republishes_pending_state_that_then_drives_idle_barriers() -> None:
    _, reader = _quiet_topic()
    start = offset({"a": {0: 120, 1: 120}}, idle=3)
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first["idleBarrier"] == 4
    idle_barriers.publish("earlierRun", PendingHint(batch_id=8, pending_rows=40))  # still some
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second["idleBarrier"] == 5
    idle_barriers.publish("earlierRun", None)  # barrier 9 wrote the rest
    assert reader.latestOffset(second, ReadAllAvailable()) is second


def test_a_fresh_query_forces_no_idle_barrier() -> None:
    _, reader = _quiet_topic(at=0)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) is start
    # initialOffset() again (Spark asks on every trigger until the first batch): same token.
    again = reader.initialOffset()
    assert again["barrierToken"] == start["barrierToken"]
    assert reader.latestOffset(again, ReadAllAvailable()) is again


def test_a_resumed_run_with_new_records_plans_them_and_forces_nothing_more() -> None:
    lookup, reader = _quiet_topic()
    start = offset({"a": {0: 100, 1: 120}}, idle=3)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == offset({"a": {0: 120, 1: 120}}, idle=3)  # the batch reaches the sink anyway
    assert reader.latestOffset(end, ReadAllAvailable()) is end


def test_the_resume_barrier_comes_with_the_default_read_limit_too() -> None:
    lookup = FakeLookup({"a": 2})
    lookup.ends = {TP("a", 0): 120, TP("a", 1): 120}
    reader = reader_for(lookup, subscribe="a", maxOffsetsPerTrigger="10")
    start = offset({"a": {0: 120, 1: 120}})
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {**start, "idleBarrier": 1}
    assert reader.latestOffset(end, ReadMaxRows(10)) is end


def test_a_restart_that_replans_the_last_batch_first_forces_no_extra_barrier() -> None:
    # Spark re-runs the earlier run's uncommitted batch with partitions() before any
    # latestOffset(); that batch reaches the sink, whose commit publishes the hint here.
    _, reader = _quiet_topic()
    before = offset({"a": {0: 100, 1: 100}}, idle=3)
    logged_end = offset({"a": {0: 120, 1: 120}}, idle=3)
    assert ranges(reader.partitions(before, logged_end)) == [("a-0", 100, 120), ("a-1", 100, 120)]
    assert reader.latestOffset(logged_end, ReadAllAvailable()) is logged_end

    _, rerun = _quiet_topic()
    rerun.partitions(before, logged_end)
    idle_barriers.publish("earlierRun", PendingHint(batch_id=7, pending_rows=5))
    assert rerun.latestOffset(logged_end, ReadAllAvailable())["idleBarrier"] == 4


def test_the_resume_barrier_and_a_hint_on_this_host_make_one_barrier() -> None:
    _, reader = _quiet_topic()
    idle_barriers.publish("earlierRun", PendingHint(batch_id=7, pending_rows=5))
    start = offset({"a": {0: 120, 1: 120}}, idle=3)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["idleBarrier"] == 4
    # Barrier 8 is still running when Spark asks again: hint 7 was answered by it.
    assert reader.latestOffset(end, ReadAllAvailable()) is end


def test_available_now_after_a_restart_writes_pending_state_before_it_ends() -> None:
    # prepareForTriggerAvailableNow comes first; the query ends when latestOffset returns its
    # start, which must not happen before the pending state was written.
    _, reader = _quiet_topic()
    reader.prepareForTriggerAvailableNow()
    start = offset({"a": {0: 120, 1: 120}}, idle=3)
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {**start, "idleBarrier": 4}
    idle_barriers.publish("earlierRun", PendingHint(batch_id=5, pending_rows=9))
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {**start, "idleBarrier": 5}
    idle_barriers.publish("earlierRun", None)
    assert reader.latestOffset(second, ReadAllAvailable()) is second  # the query ends


def test_an_offset_without_a_token_still_gets_the_resume_barrier() -> None:
    _, reader = _quiet_topic()
    start: dict[str, Any] = {"offsets": {"a": {"0": 120, "1": 120}}, "idleBarrier": 0}
    assert reader.latestOffset(start, ReadAllAvailable()) == {**start, "idleBarrier": 1}


# --- bounded input (endingOffsets & co., issue 9) ---------------------------------------------


def _bounded(ends: Mapping[int, int], **options: str) -> tuple[TimedLookup, KafkaStreamReader]:
    lookup = TimedLookup({"t": len(ends)})
    lookup.ends = {TP("t", p): off for p, off in ends.items()}
    return lookup, reader_for(lookup, subscribe="t", **options)


def test_ending_offsets_json_is_resolved_once_into_the_initial_offset() -> None:
    lookup, reader = _bounded({0: 30, 1: 30}, endingOffsets='{"t": {"0": 10, "1": -1}}')
    start = reader.initialOffset()
    assert start["ending"] == {"t": {"0": 10, "1": 30}}
    assert start["finished"] == {} and "endOfData" not in start
    lookup.ends = {TP("t", 0): 50, TP("t", 1): 50}
    end = reader.latestOffset(start, ReadAllAvailable())
    # -1 was resolved when the query started (30), not now (50)
    assert end["offsets"] == {"t": {"0": 10, "1": 30}}
    assert end["ending"] == start["ending"]
    assert end["finished"] == {"t": [0, 1]} and end["endOfData"] is True
    assert ranges(reader.partitions(start, end)) == [("t-0", 0, 10), ("t-1", 0, 30)]
    # after the end of data: no more batches
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_ending_latest_is_the_latest_when_the_query_first_starts() -> None:
    lookup, reader = _bounded({0: 5}, endingOffsets="latest")
    start = reader.initialOffset()
    assert start["ending"] == {"t": {"0": 5}}
    lookup.ends = {TP("t", 0): 9}
    fresh = reader_for(lookup, subscribe="t", endingOffsets="latest")  # a restart
    end = fresh.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {"t": {"0": 5}} and end["endOfData"] is True


def test_a_partition_short_of_its_end_waits_for_records_and_finished_ones_are_not_looked_up() -> (
    None
):
    lookup, reader = _bounded({0: 4, 1: 20}, endingOffsets='{"t": {"0": 4, "1": 100}}')
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first["offsets"] == {"t": {"0": 4, "1": 20}}
    assert first["finished"] == {"t": [0]} and "endOfData" not in first
    lookup.ends = {TP("t", 0): 4, TP("t", 1): 150}
    lookup.latest_calls.clear()
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second["offsets"] == {"t": {"0": 4, "1": 100}}  # never past the end
    assert second["endOfData"] is True
    assert ranges(reader.partitions(first, second)) == [("t-0", 4, 4), ("t-1", 20, 100)]
    # once every partition is finished the broker is not asked again
    lookup.latest_calls.clear()
    assert reader.latestOffset(second, ReadAllAvailable()) == second
    assert lookup.latest_calls == []


def test_a_restart_resumes_only_unfinished_partitions_without_re_resolving_ends() -> None:
    lookup, reader = _bounded({0: 4, 1: 20}, endingOffsets="latest")
    checkpointed = KafkaSourceOffset(
        {TP("t", 0): 4, TP("t", 1): 7}, 0, "earlierRun", None, {TP("t", 0): 4, TP("t", 1): 20}
    ).to_json()
    assert checkpointed["finished"] == {"t": [0]}
    lookup.ends = {TP("t", 0): 9, TP("t", 1): 60}
    restarted = reader_for(lookup, subscribe="t", endingOffsets="latest")
    end = restarted.latestOffset(checkpointed, ReadAllAvailable())
    assert end["offsets"] == {"t": {"0": 4, "1": 20}} and end["endOfData"] is True
    assert ranges(restarted.partitions(checkpointed, end)) == [("t-0", 4, 4), ("t-1", 7, 20)]


def test_partitions_added_to_a_bounded_topic_are_not_read() -> None:
    lookup, reader = _bounded({0: 5}, endingOffsets="latest")
    start = reader.initialOffset()
    lookup.partitions["t"] = [0, 1]
    lookup.ends[TP("t", 1)] = 8
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {"t": {"0": 5}} and end["endOfData"] is True


def test_available_now_stops_at_the_earlier_of_target_and_end() -> None:
    lookup, reader = _bounded({0: 10, 1: 10}, endingOffsets='{"t": {"0": 5, "1": 50}}')
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    lookup.ends = {TP("t", 0): 99, TP("t", 1): 99}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {"t": {"0": 5, "1": 10}}
    assert end["finished"] == {"t": [0]}
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_max_offsets_per_trigger_splits_a_bounded_read_and_only_the_last_batch_ends_data() -> None:
    lookup, reader = _bounded({0: 100}, endingOffsets='{"t": {"0": 25}}', maxOffsetsPerTrigger="10")
    offset_ = reader.initialOffset()
    ends = []
    while True:
        nxt = reader.latestOffset(offset_, ReadMaxRows(10))
        if nxt == offset_:
            break
        ends.append((nxt["offsets"]["t"]["0"], nxt.get("endOfData", False)))
        offset_ = nxt
    assert ends == [(10, False), (20, False), (25, True)]


def test_an_idle_barrier_still_comes_after_the_end_of_data(hint_dir: Path) -> None:
    lookup, reader = _bounded({0: 5}, endingOffsets="latest")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["endOfData"] is True
    idle_barriers.publish(start["barrierToken"], PendingHint(batch_id=0, pending_rows=3))
    idle = reader.latestOffset(end, ReadAllAvailable())
    assert idle["idleBarrier"] == 1 and idle["endOfData"] is True
    assert idle["offsets"] == end["offsets"]
