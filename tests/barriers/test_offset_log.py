"""Spark's offset log and query metadata, parsed from real Spark 4.3 checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from unaligned.barriers.offset_log import (
    LoggedOffset,
    parse_offset_log,
    read_offset_log,
    source_offsets,
)
from unaligned.checkpoint import Checkpoint
from unaligned.errors import BarrierError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "spark_checkpoints"


def test_v1_offset_log_with_two_sources() -> None:
    entry = read_offset_log(Checkpoint.resolve(str(FIXTURES / "v1_two_sources")), 2)
    assert entry.version == 1
    assert entry.batch_timestamp_ms == 1795372420083
    assert entry.batch_watermark_ms == 0
    assert entry.conf["spark.sql.shuffle.partitions"] == "1"
    assert entry.sources == (
        LoggedOffset("0", 8),
        LoggedOffset("1", {"offset": 9, "timestamp": 3000}),
    )


def test_v2_offset_log_with_named_sources() -> None:
    entry = read_offset_log(Checkpoint.resolve(str(FIXTURES / "v2_named_sources")), 3)
    assert entry.version == 2
    assert entry.batch_timestamp_ms == 1795372479771
    assert {s.source_id: s.offset for s in entry.sources} == {
        "rates": 11,
        "micro_rates": {"offset": 12, "timestamp": 4000},
    }


def test_v2_offset_log_with_one_unnamed_source() -> None:
    entry = read_offset_log(Checkpoint.resolve(str(FIXTURES / "v2_one_source")), 1)
    assert entry.version == 2
    assert entry.batch_timestamp_ms == 1795372375234
    assert entry.sources == (LoggedOffset("0", 4),)


def test_missing_offsets_file_names_the_file_and_batch(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "v1_two_sources", tmp_path / "cp")
    with pytest.raises(BarrierError, match=r"offsets/7 for batch 7 does not exist"):
        read_offset_log(Checkpoint.resolve(str(tmp_path / "cp")), 7)


def test_missing_query_metadata(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "v1_two_sources", tmp_path / "cp")
    (tmp_path / "cp" / "metadata").unlink()
    with pytest.raises(BarrierError, match=r"query metadata .*metadata does not exist"):
        Checkpoint.resolve(str(tmp_path / "cp")).query_id()
    (tmp_path / "cp" / "metadata").write_text('{"runId": "x"}')
    with pytest.raises(BarrierError, match="has no JSON 'id'"):
        Checkpoint.resolve(str(tmp_path / "cp")).query_id()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"incomplete \(0 line"),
        ("v1", "incomplete"),
        ("v3\n{}\n1", "version v3 is not supported"),
        ("1\n{}\n1", "is not a version"),
        ("v1\n\n1", "no batch metadata line"),
        ("v1\n{not json\n1", "metadata line is not JSON"),
        ('v1\n{"batchWatermarkMs":0}\n1', "no integer batchTimestampMs"),
        ('v1\n{"batchTimestampMs":5}\n{oops', "offset of source '0' is not JSON"),
        ('v2\n{"batchTimestampMs":5}\nno-colon', "is not '<id>:<offset>'"),
    ],
)
def test_malformed_offset_log(text: str, message: str) -> None:
    with pytest.raises(BarrierError, match=message) as info:
        parse_offset_log(text, name="cp/offsets/4")
    assert "cp/offsets/4" in str(info.value)


def test_void_offset_crlf_and_trailing_newline() -> None:
    text = 'v1\r\n{"batchTimestampMs":12,"conf":{}}\r\n-\r\n{"t":{"0":5}}\n'
    entry = parse_offset_log(text)
    assert entry.batch_timestamp_ms == 12
    assert entry.sources == (LoggedOffset("0", None), LoggedOffset("1", {"t": {"0": 5}}))


def test_source_offsets_from_lines() -> None:
    lines = (FIXTURES / "v2_named_sources" / "offsets" / "2").read_text().split("\n")
    assert source_offsets(lines) == (
        LoggedOffset("rates", 10),
        LoggedOffset("micro_rates", {"offset": 9, "timestamp": 3000}),
    )
    assert source_offsets(["v2", "{}", "kafka:-"]) == (LoggedOffset("kafka", None),)
