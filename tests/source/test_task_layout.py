"""The layout drain (:mod:`unaligned.source.planning.task_layout`): before a batch deals the
topic-partitions to the read tasks otherwise than the batch before it (another ``readTasks``,
partitions added or gone), the source plans one batch that reads nothing, at the old layout,
marked ``layoutDrain``; the new layout applies from the next batch. Called as Spark calls the
reader, against a fake broker."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from fake_offset_lookup import FakeLookup, reader_for
from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.errors import DataLossError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.planning.offset_ranges import OffsetRange, group_ranges
from unaligned.source.planning.task_layout import task_layout

TP = TopicPartitionId


@pytest.fixture(autouse=True)
def hint_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HINT_DIR_ENV, str(tmp_path / "hints"))


def logged(
    positions: Mapping[int, int], read_tasks: int | None, topic: str = "t"
) -> dict[str, Any]:
    """An end offset an earlier run wrote: ``topic``'s partitions at ``positions``."""
    flat = {TP(topic, p): off for p, off in positions.items()}
    return KafkaSourceOffset(flat, 0, "earlierRun", read_tasks=read_tasks).to_json()


def groups(planned: list[Any]) -> list[list[tuple[int, int, int]]]:
    return [[(r.tp.partition, r.start, r.end) for r in p.ranges] for p in planned]


def broker(partitions: int, end: int) -> FakeLookup:
    lookup = FakeLookup({"t": partitions})
    lookup.ends = {TP("t", p): end for p in range(partitions)}
    return lookup


def test_task_layout_deals_partitions_round_robin_in_order() -> None:
    tps = [TP("t", p) for p in range(5)]
    assert task_layout(tps, 2) == {tps[0]: 0, tps[1]: 1, tps[2]: 0, tps[3]: 1, tps[4]: 0}
    assert task_layout(tps[:2], 8) == {tps[0]: 0, tps[1]: 1}  # no more tasks than partitions
    assert task_layout(tps[:3], None) == {tps[0]: 0, tps[1]: 1, tps[2]: 2}


@pytest.mark.parametrize("read_tasks", [None, 1, 2, 3, 8])
def test_task_layout_is_where_group_ranges_puts_each_partition(read_tasks: int | None) -> None:
    tps = [TP("b", 1), TP("a", 0), TP("b", 0), TP("a", 2), TP("c", 0)]
    groups = group_ranges([OffsetRange(tp, 0, 0) for tp in tps], read_tasks)
    dealt = {r.tp: index for index, group in enumerate(groups) for r in group}
    assert task_layout(tps, read_tasks) == dealt


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2)])
def test_a_new_read_task_count_is_preceded_by_a_drain_at_the_old_one(
    before: int, after: int
) -> None:
    reader = reader_for(broker(4, 90), subscribe="t", readTasks=str(after))
    start = logged({p: 50 for p in range(4)}, before)

    drain = reader.latestOffset(start, ReadAllAvailable())
    assert drain["layoutDrain"] is True
    assert drain["readTasks"] == before and drain["offsets"] == start["offsets"]
    assert drain["idleBarrier"] == start["idleBarrier"] + 1  # a new offset: Spark plans it
    planned = reader.partitions(start, drain)
    assert len(planned) == before, "the drain runs at the old task count"
    layout = task_layout([TP("t", p) for p in range(4)], before)
    for index, group in enumerate(groups(planned)):
        assert group == [(p, 50, 50) for p in range(4) if layout[TP("t", p)] == index]

    following = reader.latestOffset(drain, ReadAllAvailable())
    assert "layoutDrain" not in following and following["readTasks"] == after
    assert groups(reader.partitions(drain, following)) == [
        [(p, 50, 90) for p in range(4) if p % after == i] for i in range(after)
    ]
    # Spark re-running either batch after a restart plans it again from its offsets alone.
    again = reader_for(broker(4, 90), subscribe="t", readTasks=str(after))
    assert groups(again.partitions(start, drain)) == groups(planned)


def test_partitions_added_to_the_topic_are_read_after_a_drain() -> None:
    lookup = broker(4, 90)
    reader = reader_for(lookup, subscribe="t")
    start = logged({0: 50, 1: 50}, 2)
    drain = reader.latestOffset(start, ReadAllAvailable())
    assert drain["layoutDrain"] is True and drain["offsets"] == {"t": {"0": 50, "1": 50}}
    assert groups(reader.partitions(start, drain)) == [[(0, 50, 50)], [(1, 50, 50)]]
    following = reader.latestOffset(drain, ReadAllAvailable())
    assert following["readTasks"] == 2
    assert groups(reader.partitions(drain, following)) == [
        [(0, 50, 90), (2, 0, 90)],
        [(1, 50, 90), (3, 0, 90)],
    ]


def test_a_drain_is_planned_with_nothing_new_to_read_and_under_a_read_limit() -> None:
    reader = reader_for(broker(2, 50), subscribe="t", readTasks="1", maxOffsetsPerTrigger="10")
    start = logged({0: 50, 1: 50}, 2)
    drain = reader.latestOffset(start, ReadMaxRows(10))
    assert drain["layoutDrain"] is True and drain["readTasks"] == 2
    # after the drain, nothing new to read at the new layout: no batch
    assert reader.latestOffset(drain, ReadMaxRows(10)) is drain


def test_an_unchanged_layout_plans_no_drain_and_records_its_count() -> None:
    reader = reader_for(broker(4, 90), subscribe="t", readTasks="2")
    start = logged({p: 50 for p in range(4)}, 2)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert "layoutDrain" not in end and end["readTasks"] == 2
    assert len(reader.partitions(start, end)) == 2


def test_more_tasks_than_partitions_is_no_change_of_layout() -> None:
    reader = reader_for(broker(2, 90), subscribe="t", readTasks="8")
    start = logged({0: 50, 1: 50}, 2)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert "layoutDrain" not in end and end["readTasks"] == 8
    assert len(reader.partitions(start, end)) == 2


def test_no_drain_at_the_query_start_nor_with_splitting_options() -> None:
    lookup = broker(4, 90)
    reader = reader_for(lookup, subscribe="t", readTasks="2", startingOffsets="earliest")
    initial = reader.initialOffset()
    lookup.partitions["t"] = list(range(6))
    assert "layoutDrain" not in reader.latestOffset(initial, ReadAllAvailable())
    split = reader_for(broker(4, 90), subscribe="t", minPartitions="8")
    end = split.latestOffset(logged({p: 50 for p in range(4)}, 2), ReadAllAvailable())
    assert "layoutDrain" not in end
    assert end["splitRanges"] is True  # the sink: no stable layout, pending state is moved


def test_the_drain_keeps_the_topic_ids_so_the_next_batch_sees_a_recreated_topic() -> None:
    lookup = broker(2, 90)
    lookup.ids = {"t": "new"}
    reader = reader_for(lookup, subscribe="t", readTasks="1")
    start = {**logged({0: 50, 1: 50}, 2), "topicIds": {"t": "old"}}
    drain = reader.latestOffset(start, ReadAllAvailable())
    assert drain["topicIds"] == {"t": "old"}
    following = reader.latestOffset(drain, ReadAllAvailable())
    with pytest.raises(DataLossError, match="deleted and re-created"):
        reader.partitions(drain, following)
