"""The source's side of stopping, through the driver-side stream reader on a fake broker:
hold without drain, drain to a frozen end, and what a later run does with either."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from checkpoint_files import new_checkpoint, plan, spark_commit
from fake_offset_lookup import FakeLookup, reader_for
from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.final_checkpoint import finished_batch, mark_finished
from unaligned.finishing.stop_request import (
    link,
    mark_completed,
    mark_honoured,
    read_request,
    request_stop,
)
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.stopping import SourceStops
from unaligned.source.stream_reader import KafkaStreamReader

TP = TopicPartitionId
TOKEN = "tok"
ALL = ReadAllAvailable()


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A checkpoint linked to the query's token on this host (as the sink's barrier does)."""
    monkeypatch.setenv(HINT_DIR_ENV, str(tmp_path / "hints"))
    link(TOKEN, Checkpoint.resolve(str(tmp_path / "ck")))
    return str(tmp_path / "ck")


def at(positions: Mapping[int, int], **fields: Any) -> dict[str, Any]:
    return KafkaSourceOffset({TP("t", p): o for p, o in positions.items()}, 0, TOKEN, **fields)


def broker(ends: Mapping[int, int]) -> FakeLookup:
    lookup = FakeLookup({"t": len(ends)})
    lookup.ends = {TP("t", p): o for p, o in ends.items()}
    return lookup


def started(lookup: FakeLookup, start: dict[str, Any], **options: str) -> KafkaStreamReader:
    """A reader that already ran a batch ending at ``start`` (no resume barrier due)."""
    reader = reader_for(lookup, subscribe="t", **options)
    reader.partitions(start, start)
    return reader


def test_stop_without_drain_plans_no_batch_after_the_last_one(checkpoint: str) -> None:
    lookup = broker({0: 100, 1: 100})
    start = at({0: 100, 1: 100}).to_json()
    reader = started(lookup, start)
    request_stop(Checkpoint.resolve(checkpoint), drain=False)
    lookup.ends = {TP("t", 0): 500, TP("t", 1): 500}  # new records keep coming
    assert reader.latestOffset(start, ALL) == start
    honoured = read_request(Checkpoint.resolve(checkpoint))
    assert honoured is not None and honoured.honoured_by is not None
    assert reader.latestOffset(start, ALL) == start  # still holding, request or not

    later_run = started(lookup, start)  # a restart resumes exactly there
    end = later_run.latestOffset(start, ALL)
    assert end["offsets"] == {"t": {"0": 500, "1": 500}}
    assert (
        read_request(Checkpoint.resolve(checkpoint)) == honoured
    )  # acted on once, by the earlier run


def test_a_drain_freezes_the_end_at_the_latest_offsets_and_finishes_there(
    checkpoint: str,
) -> None:
    lookup = broker({0: 300, 1: 120})
    start = at({0: 100, 1: 100}).to_json()
    reader = started(lookup, start, maxOffsetsPerTrigger="100")
    request_stop(Checkpoint.resolve(checkpoint), drain=True)
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first["ending"] == {"t": {"0": 300, "1": 120}} and first["drained"] is True
    assert "endOfData" not in first  # the limit still applies: 100 of the 220 records
    reader.partitions(start, first)

    lookup.ends = {TP("t", 0): 900, TP("t", 1): 900}  # produced after the freeze: not read
    second = reader.latestOffset(first, reader.getDefaultReadLimit())
    reader.partitions(first, second)
    third = reader.latestOffset(second, reader.getDefaultReadLimit())
    assert third["offsets"] == {"t": {"0": 300, "1": 120}} and third["endOfData"] is True
    reader.partitions(second, third)
    assert reader.latestOffset(third, ALL) == third  # finished: no batch after the final one


def test_a_drain_of_a_query_at_rest_runs_one_final_checkpoint_batch(checkpoint: str) -> None:
    lookup = broker({0: 100})
    start = at({0: 100}).to_json()
    reader = started(lookup, start)
    mark_finished(
        Checkpoint.resolve(checkpoint), 3
    )  # a marker an earlier drain left: stale from now on
    request_stop(Checkpoint.resolve(checkpoint), drain=True)
    end = reader.latestOffset(start, ALL)
    assert end["idleBarrier"] == 1 and end["endOfData"] is True and end["drained"] is True
    assert [[(r.start, r.end) for r in p.ranges] for p in reader.partitions(start, end)] == [
        [(100, 100)]
    ]
    assert finished_batch(Checkpoint.resolve(checkpoint)) is None


def test_a_drain_of_a_bounded_query_keeps_the_nearer_end(checkpoint: str) -> None:
    lookup = broker({0: 500, 1: 500})
    start = at({0: 0, 1: 0}, ending={TP("t", 0): 50, TP("t", 1): 800}).to_json()
    reader = started(lookup, start, endingOffsets="latest")
    request_stop(Checkpoint.resolve(checkpoint), drain=True)
    end = reader.latestOffset(start, ALL)
    assert end["ending"] == {"t": {"0": 50, "1": 500}} and end["endOfData"] is True


def test_a_later_run_reads_on_after_a_completed_drain_unless_it_was_given_an_end(
    checkpoint: str,
) -> None:
    drained_end = at({0: 200}, ending={TP("t", 0): 200}, drained=True).to_json()
    assert drained_end["endOfData"] is True
    lookup = broker({0: 700})
    later_run = started(lookup, at({0: 150}).to_json())  # planned its own batch before
    end = later_run.latestOffset(drained_end, ALL)
    assert end["offsets"] == {"t": {"0": 700}} and "ending" not in end

    bounded_run = started(lookup, at({0: 150}).to_json(), endingOffsets="latest")
    assert bounded_run.latestOffset(drained_end, ALL) == drained_end  # ends at once


def test_a_run_that_re_runs_the_final_batch_of_a_drain_finishes(checkpoint: str) -> None:
    before = at({0: 150}, ending={TP("t", 0): 200}, drained=True).to_json()
    final = at({0: 200}, ending={TP("t", 0): 200}, drained=True).to_json()
    reader = reader_for(broker({0: 700}), subscribe="t")
    assert len(reader.partitions(before, final)) == 1  # Spark re-runs the logged batch first
    assert reader.latestOffset(final, ALL) == final


def test_a_run_that_resumes_in_the_middle_of_a_drain_continues_it(checkpoint: str) -> None:
    middle = at({0: 150}, ending={TP("t", 0): 200}, drained=True).to_json()
    reader = started(broker({0: 700}), middle)
    end = reader.latestOffset(middle, ALL)
    assert end["offsets"] == {"t": {"0": 200}} and end["endOfData"] is True


def test_requests_are_read_at_most_once_per_poll_interval(checkpoint: str) -> None:
    now = [0.0]
    stops = SourceStops(bounded_by_options=False, clock=lambda: now[0])
    begin = KafkaSourceOffset.from_json(at({0: 1}).to_json(), "x")
    assert stops.poll(begin) is None  # read: nothing there
    request_stop(Checkpoint.resolve(checkpoint), drain=False)
    now[0] = 0.5
    assert stops.poll(begin) is None  # not read again yet
    now[0] = 1.0
    seen = stops.poll(begin)
    assert seen is not None and seen[0].location == checkpoint and not seen[1].drain


def test_a_drain_an_earlier_run_honoured_but_never_logged_is_honoured_again(
    checkpoint: str,
) -> None:
    request = request_stop(Checkpoint.resolve(checkpoint), drain=True)
    mark_honoured(
        Checkpoint.resolve(checkpoint), request, "crashedRun"
    )  # killed before Spark logged the offsets
    start = at({0: 100}).to_json()
    end = started(broker({0: 400}), start).latestOffset(start, ALL)
    assert end["ending"] == {"t": {"0": 400}} and end["drained"] is True
    again = read_request(Checkpoint.resolve(checkpoint))
    assert again is not None and again.honoured_by not in (None, "crashedRun")


def test_a_drain_that_reached_the_offset_log_or_completed_is_not_honoured_again(
    checkpoint: str,
) -> None:
    request = mark_honoured(
        Checkpoint.resolve(checkpoint),
        request_stop(Checkpoint.resolve(checkpoint), drain=True),
        "earlierRun",
    )
    middle = at({0: 150}, ending={TP("t", 0): 200}, drained=True).to_json()
    end = started(broker({0: 700}), middle).latestOffset(middle, ALL)
    assert end["ending"] == {"t": {"0": 200}}  # the logged freeze, not the latest offsets
    assert read_request(Checkpoint.resolve(checkpoint)) == request

    mark_completed(
        Checkpoint.resolve(checkpoint), 9
    )  # the sink, once the final checkpoint committed
    resumed = at({0: 200}).to_json()  # a later run that read on
    end = started(broker({0: 700}), resumed).latestOffset(resumed, ALL)
    assert end["offsets"] == {"t": {"0": 700}} and "ending" not in end
    completed = read_request(Checkpoint.resolve(checkpoint))
    assert completed is not None and completed.completed_batch == 9


def test_a_restart_of_a_finished_query_plans_no_batch_not_even_a_resume_barrier(
    checkpoint: str,
) -> None:
    finished = at({0: 200}, ending={TP("t", 0): 200}).to_json()
    reader = reader_for(broker({0: 700}), subscribe="t", endingOffsets="latest")
    assert reader.latestOffset(finished, ALL) == finished
    unfinished = at({0: 100}).to_json()  # for contrast: a resumed run forces one barrier
    resumed = reader_for(broker({0: 100}), subscribe="t").latestOffset(unfinished, ALL)
    assert resumed["idleBarrier"] == 1


def test_an_available_now_run_that_read_everything_marks_its_last_batch_finished(
    checkpoint: str,
) -> None:
    """Trigger.AvailableNow without an end: once its target is read and nothing is pending,
    latestOffset returns its start (Spark ends the query) and the committed last batch gets the
    finished marker; while the target is not reached, or the batch is not committed, none."""
    root = new_checkpoint(Path(checkpoint))
    lookup = broker({0: 100, 1: 50})
    start = at({0: 100, 1: 50}).to_json()
    reader = started(lookup, start)
    reader.prepareForTriggerAvailableNow()
    plan(root, 4, [start])
    assert reader.latestOffset(start, ALL) == start
    assert finished_batch(Checkpoint.resolve(checkpoint)) is None  # batch 4 not committed yet
    spark_commit(root, 4)
    assert reader.latestOffset(start, ALL) == start
    assert finished_batch(Checkpoint.resolve(checkpoint)) == 4

    behind = at({0: 60, 1: 50}).to_json()  # the target is not reached: a batch is planned
    other = started(broker({0: 100, 1: 50}), behind)
    other.prepareForTriggerAvailableNow()
    assert other.latestOffset(behind, ALL) != behind


def test_a_run_under_another_trigger_marks_nothing(checkpoint: str) -> None:
    root = new_checkpoint(Path(checkpoint))
    start = at({0: 100}).to_json()
    reader = started(broker({0: 100}), start)
    plan(root, 2, [start])
    spark_commit(root, 2)
    assert reader.latestOffset(start, ALL) == start
    assert finished_batch(Checkpoint.resolve(checkpoint)) is None
