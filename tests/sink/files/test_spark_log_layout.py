"""Spark's layout of the ``_spark_metadata`` log (unaligned.sink.files.spark_log_layout): the
output's URI as Spark qualifies it, the interval Spark derives and the names it reads."""

from __future__ import annotations

import pytest

from unaligned.sink.files.spark_log_layout import (
    LogFile,
    compact_interval,
    derive_compact_interval,
    fixed_interval,
    log_file_name,
    spark_uri,
)


def test_uris_are_what_spark_qualifies_the_output_to() -> None:
    assert spark_uri("/data/out") == "file:/data/out"
    assert spark_uri("/data/a b/out/") == "file:/data/a%20b/out"
    assert spark_uri("file:///data/out") == "file:/data/out"
    assert spark_uri("file:/data/out") == "file:/data/out"
    assert spark_uri("s3a://bucket/table/") == "s3a://bucket/table"
    assert spark_uri("hdfs://nn:8020/t") == "hdfs://nn:8020/t"


@pytest.mark.parametrize(
    ("default", "latest_compact", "expected"),
    # Spark's own examples (CompactibleFileStreamLog, SPARK-18187), and the usual cases.
    [(5, 11, 6), (10, 9, 10), (10, 19, 20), (3, 5, 6), (2, 5, 2), (4, 3, 4), (10, 4, 5)],
)
def test_a_single_compaction_file_fixes_the_interval_as_spark_derives_it(
    default: int, latest_compact: int, expected: int
) -> None:
    assert derive_compact_interval(default, latest_compact) == expected


def test_two_compaction_files_fix_the_interval_and_name_every_id() -> None:
    files = [LogFile(i, log_file_name(i, 10), (i + 1) % 10 == 0, 0) for i in range(25)]
    assert fixed_interval(files) == 10 == compact_interval(files, 3)
    assert fixed_interval(files[:15]) is None  # one compaction file only constrains it
    assert compact_interval(files[:15], 3) == 5  # as Spark derives it from 9.compact alone
    assert [log_file_name(i, 10) for i in (8, 9, 19)] == ["8", "9.compact", "19.compact"]
