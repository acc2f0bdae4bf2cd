"""Merging a small batch's staged files into one before the decision (``mergeFilesBelow``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from file_sink_steps import QUERY, commit_log, make_participant, prepare_item, publish_batch
from unaligned.errors import CommitLogError
from unaligned.sink.files.file_manifest import STAGING_DIR, final_name


def test_a_small_batch_is_committed_as_one_file_in_partition_order(tmp_path: Path) -> None:
    participant = make_participant(tmp_path, compression="zstd", merge_files_below=1 << 20)
    items = [prepare_item(participant, 3, p, 25) for p in (2, 0, 1)]
    merged = participant.consolidate(items, 3)
    assert len(merged) == 1
    (item,) = merged
    assert item["final"] == final_name(3, 0, QUERY)
    assert str(item["staged"]).startswith(f"{STAGING_DIR}/{QUERY}/3/part-merged-")
    assert str(item["staged"]).endswith(".parquet.staged")
    assert item["rows"] == 75 and item["merged"] == [items[i]["staged"] for i in (1, 2, 0)]
    participant.check_decidable(merged, 3)  # its size is what the merge wrote
    staged = pq.ParquetFile(tmp_path / "out" / item["staged"])
    assert staged.metadata.row_group(0).column(0).compression == "ZSTD"
    assert staged.read().column("id").to_pylist() == [
        p * 1000 + i for p in range(3) for i in range(25)
    ]
    log = commit_log(tmp_path, "ck")
    publish_batch(participant, log, 4, rows=3, partitions=3)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == [final_name(4, 0, QUERY)]
    assert participant.committed_batch_ids() == [4]
    assert not [p for p in (tmp_path / "out" / STAGING_DIR).rglob("*") if p.is_file()]


@pytest.mark.parametrize(("below", "partitions"), [(0, 3), (100, 3), (1 << 20, 1)])
def test_a_batch_that_is_too_big_or_one_file_is_left_as_it_is(
    tmp_path: Path, below: int, partitions: int
) -> None:
    participant = make_participant(tmp_path, merge_files_below=below)
    items = [prepare_item(participant, 0, p, 10) for p in range(partitions)]
    assert participant.consolidate(items, 0) == items


def test_files_of_different_schemas_are_not_merged(tmp_path: Path) -> None:
    participant = make_participant(tmp_path, merge_files_below=1 << 20)
    items = [prepare_item(participant, 0, p, 10) for p in range(2)]
    other = tmp_path / "out" / items[1]["staged"]
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int32())}), other)
    items[1] = {**items[1], "bytes": other.stat().st_size}
    assert participant.consolidate(items, 0) == items


def test_a_staged_file_that_is_not_what_its_task_reported_is_never_decided(
    tmp_path: Path,
) -> None:
    participant = make_participant(tmp_path, merge_files_below=1 << 20)
    items = [prepare_item(participant, 0, p, 10) for p in range(2)]
    items[0] = {**items[0], "rows": 11}
    with pytest.raises(CommitLogError, match="batch 0 was not decided: .* 20 rows"):
        participant.consolidate(items, 0)
    assert not list((tmp_path / "out" / STAGING_DIR).rglob("part-merged-*"))
