"""One task attempt's staged file: a complete Parquet file under the batch's staging
directory, bounded row groups, removed on abort, and never where a reader or a glob looks."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from file_sink_steps import QUERY, chunk, make_participant, prepare_item
from unaligned.sink.files.file_manifest import STAGING_DIR, final_name
from unaligned.sink.files.file_task_writer import ROW_GROUP_ROWS


def test_prepare_stages_a_complete_parquet_file(tmp_path: Path) -> None:
    participant = make_participant(tmp_path, compression="zstd")
    item = prepare_item(participant, 3, 1, 25, attempt=2)
    assert item["final"] == final_name(3, 1, QUERY) == f"part-{QUERY}-0000000003-00001.parquet"
    assert item["staged"].startswith(f"{STAGING_DIR}/{QUERY}/3/part-00001-2-")
    assert item["queryId"] == QUERY
    assert item["rows"] == 25
    staged = tmp_path / "out" / item["staged"]
    assert item["bytes"] == staged.stat().st_size
    table = pq.read_table(staged)
    assert table.column("id").to_pylist() == list(range(1000, 1025))
    assert pq.ParquetFile(staged).metadata.row_group(0).column(0).compression == "ZSTD"
    assert not (tmp_path / "out" / item["final"]).exists()


def test_large_task_writes_bounded_row_groups(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    task = participant.open_task(0, 0, 0)
    rows = ROW_GROUP_ROWS * 2 + 5
    for start in range(0, rows, 4096):
        task.write_chunk(chunk(start, min(4096, rows - start)))
    item = task.prepare()
    metadata = pq.ParquetFile(tmp_path / "out" / item["staged"]).metadata
    assert metadata.num_rows == rows
    assert metadata.num_row_groups == 3


def test_task_abort_removes_partial_file(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    task = participant.open_task(0, 0, 0)
    task.write_chunk(chunk(0, 10))
    task.abort()
    assert [p for p in (tmp_path / "out" / STAGING_DIR).rglob("*") if p.is_file()] == []


def test_no_glob_and_no_listing_reader_finds_a_staged_file(tmp_path: Path) -> None:
    """Staged files are under ``_unaligned_staging`` (pyarrow, pandas and Spark skip ``_``
    directories) and end in ``.parquet.staged`` (no ``*.parquet`` or ``**/*.parquet`` glob
    matches them), while being written, once prepared, and when their batch is undecided."""
    participant = make_participant(tmp_path)
    out = tmp_path / "out"
    task = participant.open_task(0, 0, 0)
    task.write_chunk(chunk(0, 10))  # a task writing
    item = prepare_item(participant, 0, 1, 10)  # a task prepared
    assert list(out.rglob("*.parquet")) == []
    assert ds.dataset(out).count_rows() == 0
    assert str(item["staged"]).endswith(".parquet.staged")
    task.prepare()
    participant.commit([item], 0, lambda n: None)  # decided and renamed
    assert [p.name for p in out.rglob("*.parquet")] == [item["final"]]
    assert ds.dataset(out).count_rows() == 10
