"""The executor side of the Kafka source, without a broker: what Spark ships to a task, the
failOnDataLoss policy, a task with nothing to read, and a task's fetch rounds over scripted
answers of real record batches (what a round yields, in which order). Reading records from a
real broker is tested in integration/test_range_reads.py and test_kafka_source.py."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from pyspark.serializers import CPickleSerializer

from record_batch_builder import build_batch
from unaligned.errors import DataLossError
from unaligned.kafka.fetch.fetch_answers import FetchAnswer
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source import partition_reader
from unaligned.source.lost_records import on_data_loss
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition, read_partition
from unaligned.source.planning.offset_ranges import OffsetRange

#: Nothing listens here: a task that tried to connect would fail.
NO_BROKER = "127.0.0.1:1"


def input_partition(start: int, end: int) -> KafkaInputPartition:
    options = SourceOptions.parse(
        {
            "subscribe": "events",
            "kafka.bootstrap.servers": NO_BROKER,
            "kafka.request.timeout.ms": "2000",  # a task that connects fails fast
            "includeHeaders": "true",
        }
    )
    return KafkaInputPartition(
        index=2,
        ranges=(OffsetRange(TopicPartitionId("events", 3), start, end),),
        kafka=options.kafka,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


def test_an_input_partition_survives_the_pickling_spark_ships_it_with() -> None:
    part = input_partition(10, 20)
    serializer = CPickleSerializer()  # what Spark's Python source runner sends partitions with
    shipped = serializer.loads(serializer.dumps(part))
    assert shipped == part
    assert type(shipped) is KafkaInputPartition
    assert (shipped.ranges[0].start, shipped.ranges[0].end, shipped.include_headers) == (
        10,
        20,
        True,
    )


def test_an_empty_range_reads_nothing_and_never_connects() -> None:
    assert list(read_partition(input_partition(7, 7))) == []


def test_data_loss_stops_the_query_by_default_naming_the_records() -> None:
    message = "records of events-3 at offsets [0, 5) are gone before the query read them"
    with pytest.raises(DataLossError, match=r"events-3 at offsets \[0, 5\).*failOnDataLoss=false"):
        on_data_loss(True, message)


def test_data_loss_with_fail_on_data_loss_false_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = "records of events-3 at offsets [0, 5) are gone before the query read them"
    with caplog.at_level(logging.WARNING, logger="unaligned.source.partition_reader"):
        on_data_loss(False, message)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert message in caplog.records[0].getMessage()


# --- a task's rounds over scripted fetch answers (real record batches, no broker) ------------


class ScriptedFetcher:
    """Answers each partition's fetch from a log of prebuilt batches ``(next offset after the
    batch, bytes)``: the batches from the one holding the asked offset on, at most
    ``per_answer`` of them (so a range takes several rounds); records every round's
    partitions."""

    def __init__(self, logs: dict[TopicPartitionId, list[tuple[int, bytes]]], per_answer: int):
        self.logs = logs
        self.per_answer = per_answer
        self.rounds: list[list[TopicPartitionId]] = []

    def answers(self, wanted: Any) -> Iterator[tuple[TopicPartitionId, FetchAnswer]]:
        self.rounds.append([w.tp for w in wanted])
        for w in wanted:
            batches = [b for after, b in self.logs[w.tp] if after > w.offset][: self.per_answer]
            yield w.tp, FetchAnswer(w.tp, records=b"".join(batches))


def v2_log(tp: TopicPartitionId, count: int, per_batch: int) -> list[tuple[int, bytes]]:
    log = []
    for base in range(0, count, per_batch):
        after = min(count, base + per_batch)
        records = [(None, b"%s-%d" % (str(tp).encode(), o), [], 1_000) for o in range(base, after)]
        log.append((after, build_batch(base, records)))
    return log


def legacy_log(tp: TopicPartitionId, count: int) -> list[tuple[int, bytes]]:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    for o in range(count):
        builder.append(o, timestamp=1_000, key=None, value=b"%s-%d" % (str(tp).encode(), o))
    return [(count, bytes(builder.build()))]


def scripted_read(ranges: list[OffsetRange], fetcher: ScriptedFetcher) -> list[pa.RecordBatch]:
    part = dataclasses.replace(input_partition(0, 1), ranges=tuple(ranges), include_headers=False)
    return list(partition_reader._TaskRead(part, fetcher).batches())  # type: ignore[arg-type]


def values(batches: list[pa.RecordBatch]) -> list[tuple[str, int, int, bytes]]:
    table = pa.Table.from_batches(batches)
    return list(
        zip(
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


def expected_rows(tp: TopicPartitionId, start: int, end: int) -> list[tuple[str, int, int, bytes]]:
    return [
        (tp.topic, tp.partition, o, b"%s-%d" % (str(tp).encode(), o)) for o in range(start, end)
    ]


def test_a_round_of_many_partitions_comes_out_as_one_batch_each_partition_in_offset_order() -> None:
    tps = [TopicPartitionId("a" if p % 2 else "bb", p) for p in range(30)]
    fetcher = ScriptedFetcher({tp: v2_log(tp, 50, 10) for tp in tps}, per_answer=2)
    ranges = [OffsetRange(tp, 3, 47 - p) for p, tp in enumerate(tps)]
    batches = scripted_read(ranges, fetcher)
    assert len(fetcher.rounds) == 3  # 20 offsets an answer: [3, 20), [20, 40), the rest
    assert len(batches) == 3  # one Arrow batch a round, every partition's records in it
    rows = values(batches)
    for p, tp in enumerate(tps):
        assert [r for r in rows if r[1] == p] == expected_rows(tp, 3, 47 - p)
    first_round = values(batches[:1])
    assert [r[1] for r in first_round] == sorted(
        r[1] for r in first_round
    )  # partition after partition


def test_a_legacy_answer_is_yielded_after_what_the_round_held_and_nothing_is_lost() -> None:
    tps = [TopicPartitionId("t", p) for p in range(3)]
    logs = {
        tps[0]: v2_log(tps[0], 40, 10),
        tps[1]: legacy_log(tps[1], 25),
        tps[2]: v2_log(tps[2], 40, 10),
    }
    fetcher = ScriptedFetcher(logs, per_answer=10)
    batches = scripted_read([OffsetRange(tp, 0, 25) for tp in tps], fetcher)
    # partition 0's records were taken before partition 1's legacy answer: they come first
    assert [b.column("partition").to_pylist()[0] for b in batches] == [0, 1, 2]
    rows = values(batches)
    assert sorted(rows) == sorted(r for tp in tps for r in expected_rows(tp, 0, 25))
    assert len(rows) == 75


def test_records_past_the_decode_bound_are_decoded_before_the_round_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tps = [TopicPartitionId("t", p) for p in range(6)]
    fetcher = ScriptedFetcher({tp: v2_log(tp, 100, 100) for tp in tps}, per_answer=1)
    monkeypatch.setattr(partition_reader, "DECODE_BYTES", 1)  # every answer on its own
    batches = scripted_read([OffsetRange(tp, 0, 100) for tp in tps], fetcher)
    assert len(fetcher.rounds) == 1 and len(batches) == 6
    assert values(batches) == [r for tp in tps for r in expected_rows(tp, 0, 100)]
