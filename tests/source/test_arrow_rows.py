"""Spark's Kafka schema and Arrow chunking of record columns."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records.record_columns import (
    RecordColumns,
    kafka_arrow_schema,
    kafka_source_schema,
)
from unaligned.source.arrow_rows import to_arrow_batches

TP = TopicPartitionId("events", 3)


def make_columns(
    first_offset: int, keys: list[bytes], values: list[bytes], timestamps_ms: list[int]
) -> RecordColumns:
    """Columns of create-time records without headers, at consecutive offsets."""
    n = len(keys)
    return RecordColumns(
        offsets=np.arange(first_offset, first_offset + n, dtype=np.int64),
        timestamps_ms=np.array(timestamps_ms, np.int64),
        timestamp_types=np.zeros(n, np.int32),
        keys=pa.array(keys, type=pa.binary()),
        values=pa.array(values, type=pa.binary()),
        headers=None,
    )


# --- schema ---------------------------------------------------------------------------------


def test_schema_is_sparks_kafka_schema_with_every_field_nullable() -> None:
    plain = kafka_source_schema(False)
    assert plain.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    with_headers = kafka_source_schema(True)
    assert with_headers.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")
    assert all(f.nullable for f in with_headers.fields)
    assert with_headers["headers"].dataType.containsNull
    assert all(f.nullable for f in with_headers["headers"].dataType.elementType.fields)


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_schema_is_what_spark_checks_batches_against(include_headers: bool) -> None:
    expected = to_arrow_schema(kafka_source_schema(include_headers), timezone="UTC")
    assert kafka_arrow_schema(include_headers).equals(expected)
    assert all(field.nullable for field in expected)


# --- Arrow output ---------------------------------------------------------------------------


def test_record_batches_have_sparks_schema_and_bounded_size() -> None:
    columns = make_columns(
        0,
        [b"k%d" % i for i in range(500)],
        [os.urandom(1000) for _ in range(500)],
        [5_000 + i for i in range(500)],
    )
    batches = list(
        to_arrow_batches(
            columns, [(TP, 500)], include_headers=False, max_rows=128, max_bytes=50_000
        )
    )
    assert batches and all(b.schema.equals(kafka_arrow_schema(False)) for b in batches)
    assert all(b.num_rows <= 128 and b.nbytes <= 60_000 for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 500
    assert table.column("offset").to_pylist() == list(range(500))
    assert set(table.column("topic").to_pylist()) == {"events"}
    assert set(table.column("partition").to_pylist()) == {3}
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [
        (5_000 + i) * 1000 for i in range(500)
    ]
    assert table.column("value").to_pylist() == columns.values.to_pylist()


def test_rows_of_several_partitions_get_their_own_topic_and_partition_across_cuts() -> None:
    """Three partitions' rows in one set of columns, cut into batches of 4 rows: every row's
    topic and partition follow the pieces, whichever batch a piece's rows land in."""
    columns = make_columns(0, [b"k"] * 11, [b"v%d" % i for i in range(11)], [1_000] * 11)
    pieces = [(TopicPartitionId("a", 7), 5), (TopicPartitionId("long-topic", 0), 1), (TP, 5)]
    batches = list(to_arrow_batches(columns, pieces, False, max_rows=4))
    assert [b.num_rows for b in batches] == [4, 4, 3]
    table = pa.Table.from_batches(batches)
    assert table.column("topic").to_pylist() == ["a"] * 5 + ["long-topic"] + ["events"] * 5
    assert table.column("partition").to_pylist() == [7] * 5 + [0] + [3] * 5
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(11)]
    for b in batches:
        b.validate(full=True)


def test_pieces_that_do_not_cover_the_rows_are_refused() -> None:
    columns = make_columns(0, [b"k"] * 3, [b"v"] * 3, [1_000] * 3)
    with pytest.raises(ValueError, match="cover 2 rows of 3"):
        list(to_arrow_batches(columns, [(TP, 2)], False))


def test_before_cuts_at_the_exclusive_end() -> None:
    columns = make_columns(20, [b"k"] * 10, [b"v"] * 10, [1_000] * 10)
    assert columns.before(25).offsets.tolist() == [20, 21, 22, 23, 24]
    assert len(columns.before(20)) == 0 and columns.before(99) is columns
