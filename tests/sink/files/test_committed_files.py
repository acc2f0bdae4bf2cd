"""Reading back only what the file sink committed (manifest), never staged or stray files; every
batch of every query exactly once, across compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from unaligned import read_committed_files as public_read
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError, OptionError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.files import committed_files
from unaligned.sink.files.committed_files import (
    CommittedFilesReader,
    committed_files_schema,
    describe_committed,
    read_committed_files,
)
from unaligned.sink.files.file_manifest import MANIFEST_DIR
from unaligned.sink.files.file_participant import FileParticipant
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


QUERY = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
OTHER = "99999999-dddd-eeee-ffff-012345678901"


def _commit_batch(
    out: Path,
    batch_id: int,
    partitions: int,
    rows: int,
    finish: bool = True,
    query_id: str = QUERY,
    offset: int = 0,
) -> None:
    participant = FileParticipant(FileTarget(str(out), "snappy"), SCHEMA, query_id)
    items = []
    for p in range(partitions):
        task = participant.open_task(batch_id, p, 0)
        start = offset + batch_id * 1000 + p * 100
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
    assert describe_committed(str(out)) == {
        "batches": [0, 1],
        "files": 4,
        "rows": 12,
        "queries": 1,
    }


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
    assert batches and all(b.schema.equals(expected) for b in batches)
    assert sum(b.num_rows for b in batches) == 12


# --- several queries, compaction -------------------------------------------


def _ids(out: Path) -> list[int]:
    return list(read_committed_files(str(out)).column("id").to_pylist())


def test_every_query_read_once_in_order(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _commit_batch(out, 0, 1, 2, query_id=OTHER, offset=20_000)
    _commit_batch(out, 0, 1, 2, query_id=QUERY, offset=10_000)
    _commit_batch(out, 1, 1, 2, query_id=QUERY, offset=10_000)
    assert _ids(out) == [10_000, 10_001, 11_000, 11_001, 20_000, 20_001]
    assert describe_committed(str(out)) == {
        "batches": [0, 1, 0],
        "files": 3,
        "rows": 6,
        "queries": 2,
    }
    reader = CommittedFilesReader({"path": str(out)}, SCHEMA)
    assert sum(b.num_rows for p in reader.partitions() for b in reader.read(p)) == 6


def test_schema_comes_from_the_most_recent_entry_of_any_query(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _commit_batch(out, 5, 1, 1, query_id=QUERY)
    newer = StructType(SCHEMA.fields[:2])
    participant = FileParticipant(FileTarget(str(out), "snappy"), newer, OTHER)
    participant.finish_batch(CommitRecord(0, "files", (), 0))  # batch 0 of another query
    assert committed_files_schema({"path": str(out)}) == newer


def _compacting(out: Path, query_id: str = QUERY) -> tuple[FileParticipant, CommitLog]:
    participant = FileParticipant(
        FileTarget(str(out), "snappy"), SCHEMA, query_id, manifest_retain=2, compact_every=2
    )
    return participant, CommitLog(Checkpoint.resolve(str(out.parent / f"ck-{query_id}")))


def _publish(participant: FileParticipant, log: CommitLog, batch_id: int) -> None:
    task = participant.open_task(batch_id, 0, 0)
    task.write_chunk(
        pa.record_batch(
            [
                pa.array([batch_id], pa.int64()),
                pa.array(["x"]),
                pa.array([0], pa.timestamp("us", tz="UTC")),
            ],
            schema=ARROW,
        )
    )
    record = CommitRecord(batch_id, "files", (task.prepare(),), 0)
    log.write(record)
    participant.commit(record.prepared, batch_id, lambda n: None)
    participant.finish_batch(record)
    log.mark_done(batch_id)
    participant.clean_up(log, batch_id)


def test_reader_deduplicates_what_a_compaction_has_not_deleted_yet(tmp_path: Path) -> None:
    out = tmp_path / "out"
    participant, log = _compacting(out)
    manifest = out / MANIFEST_DIR
    saved: dict[str, str] = {}
    for batch_id in range(12):
        _publish(participant, log, batch_id)
        saved.update({p.name: p.read_text() for p in manifest.glob("*.json")})
    # A compaction that crashed after writing its compacted file, or a reader listing while
    # one runs: every older compacted file and every folded entry is still there.
    for name, text in saved.items():
        (manifest / name).write_text(text)
    assert len(list(manifest.glob("*.compacted.json"))) > 1
    assert _ids(out) == list(range(12))
    reader = CommittedFilesReader({"path": str(out)}, SCHEMA)
    assert len(reader.partitions()) == 12
    # The next compaction folds the leftovers again and deletes them.
    for batch_id in range(12, 15):
        _publish(participant, log, batch_id)
    assert len(list(manifest.glob("*.compacted.json"))) == 1
    assert len(list(manifest.glob("*.json"))) <= 2 + 2 + 1
    assert _ids(out) == list(range(15))


def test_reader_lists_again_when_a_compaction_deletes_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    participant, log = _compacting(out)
    for batch_id in range(4):  # 4 live entries: the next batch's clean-up compacts
        _publish(participant, log, batch_id)
    assert not list((out / MANIFEST_DIR).glob("*.compacted.json"))
    listings = []
    real_list = committed_files.list_manifest

    def list_then_compact(output):  # type: ignore[no-untyped-def]
        names = real_list(output)
        listings.append(names)
        if len(listings) == 1:  # a compaction runs between the listing and the reads
            _publish(participant, log, 4)
        return names

    monkeypatch.setattr(committed_files, "list_manifest", list_then_compact)
    assert _ids(out) == list(range(5))  # listed again: every batch, each once
    assert len(listings) == 2
    assert list((out / MANIFEST_DIR).glob("*.compacted.json"))


def test_a_compacted_file_that_does_not_match_its_name_is_loud(tmp_path: Path) -> None:
    out = tmp_path / "out"
    participant, log = _compacting(out)
    for batch_id in range(6):
        _publish(participant, log, batch_id)
    compacted = next((out / MANIFEST_DIR).glob("*.compacted.json"))
    doc = json.loads(compacted.read_text())
    doc["queryId"] = OTHER
    compacted.write_text(json.dumps(doc))
    with pytest.raises(CommitLogError, match="not what its name says"):
        read_committed_files(str(out))
