"""The file participant: staging, deterministic final names, idempotent renames, manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from unaligned.errors import CommitLogError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.file_participant import (
    MANIFEST_DIR,
    ROW_GROUP_ROWS,
    STAGING_DIR,
    FileParticipant,
    final_name,
    manifest_name,
)
from unaligned.sink.options import FileTarget

SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])
ARROW = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])


def _chunk(start: int, rows: int) -> pa.RecordBatch:
    ids = list(range(start, start + rows))
    return pa.record_batch(
        [pa.array(ids, pa.int64()), pa.array([str(i) for i in ids])], schema=ARROW
    )


def _participant(tmp_path: Path, compression: str = "snappy") -> FileParticipant:
    return FileParticipant(FileTarget(str(tmp_path / "out"), compression), SCHEMA)


def _prepare(
    participant: FileParticipant, batch_id: int, partition: int, rows: int, attempt: int = 0
) -> dict:
    task = participant.open_task(batch_id, partition, attempt)
    for start in range(0, rows, 10):
        task.write_chunk(_chunk(partition * 1000 + start, min(10, rows - start)))
        task.between_chunks()
    item = task.prepare()
    task.close()
    return item


def test_prepare_stages_a_complete_parquet_file(tmp_path: Path) -> None:
    participant = _participant(tmp_path, compression="zstd")
    item = _prepare(participant, 3, 1, 25, attempt=2)
    assert item["final"] == final_name(3, 1) == "part-0000000003-00001.parquet"
    assert item["staged"].startswith(f"{STAGING_DIR}/3/part-00001-2-")
    assert item["rows"] == 25
    staged = tmp_path / "out" / item["staged"]
    assert item["bytes"] == staged.stat().st_size
    table = pq.read_table(staged)
    assert table.column("id").to_pylist() == list(range(1000, 1025))
    assert pq.ParquetFile(staged).metadata.row_group(0).column(0).compression == "ZSTD"
    assert not (tmp_path / "out" / item["final"]).exists()


def test_large_task_writes_bounded_row_groups(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    task = participant.open_task(0, 0, 0)
    rows = ROW_GROUP_ROWS * 2 + 5
    for start in range(0, rows, 4096):
        task.write_chunk(_chunk(start, min(4096, rows - start)))
    item = task.prepare()
    metadata = pq.ParquetFile(tmp_path / "out" / item["staged"]).metadata
    assert metadata.num_rows == rows
    assert metadata.num_row_groups == 3


def test_commit_renames_and_is_idempotent(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    items = [_prepare(participant, 0, p, 10) for p in range(3)]
    progress: list[int] = []
    participant.commit(items, 0, progress.append)
    assert progress == [1, 2, 3]
    for item in items:
        assert (tmp_path / "out" / item["final"]).is_file()
        assert not (tmp_path / "out" / item["staged"]).exists()
    participant.commit(items, 0, lambda n: None)  # a roll-forward after a crash: no error


def test_commit_with_both_files_gone_is_loud(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    item = _prepare(participant, 0, 0, 10)
    (tmp_path / "out" / item["staged"]).unlink()
    with pytest.raises(CommitLogError, match="10 rows are lost"):
        participant.commit([item], 0, lambda n: None)


def test_manifest_entry_names_the_files(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    items = [_prepare(participant, 7, p, 5 + p) for p in (1, 0)]
    participant.commit(items, 7, lambda n: None)
    participant.finish_batch(CommitRecord(7, "files", tuple(items), 0))
    entry = json.loads((tmp_path / "out" / MANIFEST_DIR / manifest_name(7)).read_text())
    assert entry["batchId"] == 7
    assert entry["files"] == [
        {"path": final_name(7, 0), "rows": 5, "bytes": items[1]["bytes"]},
        {"path": final_name(7, 1), "rows": 6, "bytes": items[0]["bytes"]},
    ]
    assert StructType.fromJson(entry["schema"]) == SCHEMA
    assert participant.committed_batch_ids() == [7]


def test_abort_deletes_staged_files(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    item = _prepare(participant, 0, 0, 10)
    participant.abort([item], 0)
    participant.abort([item], 0)  # twice is fine
    assert not (tmp_path / "out" / item["staged"]).exists()


def test_task_abort_removes_partial_file(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    task = participant.open_task(0, 0, 0)
    task.write_chunk(_chunk(0, 10))
    task.abort()
    assert [p for p in (tmp_path / "out" / STAGING_DIR).rglob("*") if p.is_file()] == []


def test_clean_up_keeps_staging_of_unfinished_decided_batches(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    log = CommitLog.under_checkpoint(str(tmp_path / "ck"))
    decided = _prepare(participant, 1, 0, 10)
    log.write(CommitRecord(1, "files", (decided,), 0))  # decided, not finished
    _prepare(participant, 0, 0, 10)  # a leftover of batch 0
    _prepare(participant, 2, 0, 10)  # undecided batch 2
    assert participant.clean_up(log, 1) == 1  # only batch 0
    assert (tmp_path / "out" / decided["staged"]).is_file()
    assert (tmp_path / "out" / STAGING_DIR / "2").is_dir()
    assert participant.clean_up(log, None) == 1  # batch 2; batch 1 still kept
    assert (tmp_path / "out" / decided["staged"]).is_file()
