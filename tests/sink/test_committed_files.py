"""Reading back only what the file sink committed (manifest), never staged or stray files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from unaligned import read_committed_files as public_read
from unaligned.errors import CommitLogError, OptionError
from unaligned.sink.commit_log import CommitRecord
from unaligned.sink.committed_files import (
    CommittedFilesReader,
    committed_files_schema,
    describe_committed,
    read_committed_files,
)
from unaligned.sink.file_participant import FileParticipant
from unaligned.sink.options import FileTarget

SCHEMA = StructType(
    [
        StructField("id", LongType(), False),
        StructField("s", StringType(), True),
        StructField("ts", TimestampType(), True),
    ]
)
ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("s", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def _commit_batch(
    out: Path, batch_id: int, partitions: int, rows: int, finish: bool = True
) -> None:
    participant = FileParticipant(FileTarget(str(out), "snappy"), SCHEMA)
    items = []
    for p in range(partitions):
        task = participant.open_task(batch_id, p, 0)
        start = batch_id * 1000 + p * 100
        ids = list(range(start, start + rows))
        task.write_chunk(
            pa.record_batch(
                [
                    pa.array(ids, pa.int64()),
                    pa.array([f"s{i}" for i in ids]),
                    pa.array([i * 1_000_000 for i in ids], pa.timestamp("us", tz="UTC")),
                ],
                schema=ARROW,
            )
        )
        items.append(task.prepare())
    participant.commit(items, batch_id, lambda n: None)
    if finish:
        participant.finish_batch(CommitRecord(batch_id, "files", tuple(items), 0))


def test_reads_committed_batches_in_order(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _commit_batch(out, 0, 2, 3)
    _commit_batch(out, 1, 2, 3)
    table = read_committed_files(str(out))
    assert table.column("id").to_pylist() == [
        0,
        1,
        2,
        100,
        101,
        102,
        1000,
        1001,
        1002,
        1100,
        1101,
        1102,
    ]
    assert public_read(str(out)).equals(table)
    assert read_committed_files(str(out), columns=["s"]).column_names == ["s"]
    assert describe_committed(str(out)) == {"batches": [0, 1], "files": 4, "rows": 12}


def test_unlisted_files_are_invisible(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _commit_batch(out, 0, 1, 3)
    _commit_batch(out, 1, 1, 3, finish=False)  # renamed but no manifest entry yet
    pq.write_table(pa.table({"id": [99]}), out / "part-stray.parquet")
    assert read_committed_files(str(out)).column("id").to_pylist() == [0, 1, 2]


def test_empty_output(tmp_path: Path) -> None:
    assert read_committed_files(str(tmp_path / "nothing")).num_rows == 0
    with pytest.raises(CommitLogError, match="no committed batch"):
        committed_files_schema({"path": str(tmp_path / "nothing")})
    with pytest.raises(OptionError, match="path"):
        committed_files_schema({})


def test_schema_comes_from_the_manifest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _commit_batch(out, 0, 1, 1)
    assert committed_files_schema({"path": str(out)}) == SCHEMA


def test_corrupt_manifest_is_loud(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _commit_batch(out, 0, 1, 1)
    entry = next((out / "_unaligned_manifest").glob("*.json"))
    entry.write_text(json.dumps({"version": 1}))
    with pytest.raises(CommitLogError, match=entry.name):
        read_committed_files(str(out))


def test_batch_reader_partitions_and_arrow_schema(tmp_path: Path) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    out = tmp_path / "out"
    _commit_batch(out, 0, 3, 4)
    reader = CommittedFilesReader({"path": str(out)}, SCHEMA)
    partitions = reader.partitions()
    assert len(partitions) == 3
    batches = [b for p in partitions for b in reader.read(p)]
    expected = to_arrow_schema(SCHEMA, timezone="UTC")
    assert all(b.schema.equals(expected) for b in batches)
    assert sum(b.num_rows for b in batches) == 12
