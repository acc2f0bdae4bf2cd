"""The executor side of the Kafka source, without a broker: what Spark ships to a task, the
failOnDataLoss policy, and a task with nothing to read. Reading records from a real broker is
tested in integration/test_kafka_source.py."""

from __future__ import annotations

import logging

import pytest
from pyspark.serializers import CPickleSerializer

from unaligned.errors import DataLossError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.lost_records import on_data_loss
from unaligned.source.offset_ranges import OffsetRange
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition, read_partition

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
