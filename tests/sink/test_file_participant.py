"""The file participant: staging, deterministic final names, idempotent renames, manifest;
names per query, the legacy layout of older versions, manifest compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from unaligned.errors import CommitLogError, SinkConfigurationError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.committed_files import read_committed_files
from unaligned.sink.file_participant import (
    MANIFEST_DIR,
    ROW_GROUP_ROWS,
    STAGING_DIR,
    FileParticipant,
    compacted_manifest_name,
    final_name,
    manifest_name,
    parse_manifest_name,
)
from unaligned.sink.options import FileTarget

SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])
ARROW = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])
QUERY = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
OTHER = "99999999-dddd-eeee-ffff-012345678901"


def _chunk(start: int, rows: int) -> pa.RecordBatch:
    ids = list(range(start, start + rows))
    return pa.record_batch(
        [pa.array(ids, pa.int64()), pa.array([str(i) for i in ids])], schema=ARROW
    )


def _participant(
    tmp_path: Path, compression: str = "snappy", query_id: str | None = QUERY, **kwargs: int
) -> FileParticipant:
    return FileParticipant(
        FileTarget(str(tmp_path / "out"), compression), SCHEMA, query_id, **kwargs
    )


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
    name = manifest_name(7, QUERY)
    assert name == f"{QUERY}-0000000007.json"
    entry = json.loads((tmp_path / "out" / MANIFEST_DIR / name).read_text())
    assert entry["batchId"] == 7
    assert entry["queryId"] == QUERY
    assert entry["files"] == [
        {"path": final_name(7, 0, QUERY), "rows": 5, "bytes": items[1]["bytes"]},
        {"path": final_name(7, 1, QUERY), "rows": 6, "bytes": items[0]["bytes"]},
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
    assert (tmp_path / "out" / STAGING_DIR / QUERY / "2").is_dir()
    assert participant.clean_up(log, None) == 1  # batch 2; batch 1 still kept
    assert (tmp_path / "out" / decided["staged"]).is_file()


def test_check_decidable_refuses_a_missing_staged_file(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    items = [_prepare(participant, 0, p, 10) for p in range(2)]
    participant.check_decidable(items, 0)  # both staged files are there
    (tmp_path / "out" / items[0]["staged"]).unlink()
    with pytest.raises(CommitLogError, match="batch 0 was not decided"):
        participant.check_decidable(items, 0)
    assert not (tmp_path / "out" / items[1]["staged"]).exists()  # every item aborted


# --- names per query -----------------------------------------------------------------------------


def _publish(
    participant: FileParticipant, log: CommitLog, batch_id: int, rows: int = 3, partitions: int = 2
) -> list[dict]:
    """What the driver does for a batch: decide, rename, publish, mark done, clean up."""
    items = [_prepare(participant, batch_id, p, rows) for p in range(partitions)]
    log.write(CommitRecord(batch_id, "files", tuple(items), 0))
    participant.commit(items, batch_id, lambda n: None)
    participant.finish_batch(CommitRecord(batch_id, "files", tuple(items), 0))
    log.mark_done(batch_id)
    participant.clean_up(log, batch_id)
    return items


def _read_ids(tmp_path: Path) -> list[int]:
    return sorted(read_committed_files(str(tmp_path / "out")).column("id").to_pylist())


def _log(tmp_path: Path, name: str) -> CommitLog:
    return CommitLog.under_checkpoint(str(tmp_path / name))


def test_two_queries_on_one_path_do_not_collide(tmp_path: Path) -> None:
    first, second = _participant(tmp_path), _participant(tmp_path, query_id=OTHER)
    first_log, second_log = _log(tmp_path, "ck-1"), _log(tmp_path, "ck-2")
    for batch_id in (0, 1):
        _publish(first, first_log, batch_id)
        _publish(second, second_log, batch_id)  # the same batch and partition numbers
    one_query = [p * 1000 + i for _ in (0, 1) for p in (0, 1) for i in range(3)]
    assert _read_ids(tmp_path) == sorted(one_query * 2)  # every row of both, each once
    manifest = sorted(p.name for p in (tmp_path / "out" / MANIFEST_DIR).glob("*.json"))
    assert manifest == sorted(manifest_name(b, q) for b in (0, 1) for q in (QUERY, OTHER))
    assert len(list((tmp_path / "out").glob("part-*.parquet"))) == 8
    assert first.committed_batch_ids() == second.committed_batch_ids() == [0, 1]


def test_clean_up_and_recovery_touch_only_their_own_staging(tmp_path: Path) -> None:
    first, second = _participant(tmp_path), _participant(tmp_path, query_id=OTHER)
    first_log = _log(tmp_path, "ck-1")
    in_flight = _prepare(second, 0, 0, 10)  # the other query's task, not decided yet
    leftover = _prepare(first, 0, 0, 10)  # this query's failed attempt
    assert first.clean_up(first_log, None) == 1  # recovery: every batch, own staging only
    assert not (tmp_path / "out" / leftover["staged"]).exists()
    assert (tmp_path / "out" / in_flight["staged"]).is_file()
    _publish(first, first_log, 0)
    assert (tmp_path / "out" / in_flight["staged"]).is_file()


@pytest.mark.parametrize("query_id", ["12345", "a/b", "a.b", ""])
def test_a_query_id_that_cannot_name_files_is_refused(tmp_path: Path, query_id: str) -> None:
    with pytest.raises(SinkConfigurationError, match="cannot name files"):
        _participant(tmp_path, query_id=query_id)


def test_for_query_reads_the_id_from_the_checkpoint(tmp_path: Path) -> None:
    target = FileTarget(str(tmp_path / "out"), "snappy")
    checkpoint = tmp_path / "ck"
    with pytest.raises(SinkConfigurationError, match="query id.*metadata does not exist"):
        FileParticipant.for_query(target, SCHEMA, str(checkpoint))
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
    assert FileParticipant.for_query(target, SCHEMA, str(checkpoint)).query_id == QUERY


def test_manifest_names_parse_back() -> None:
    entry = parse_manifest_name(manifest_name(12, QUERY))
    assert entry is not None and (entry.query_id, entry.batch_id, entry.compacted) == (
        QUERY,
        12,
        False,
    )
    compacted = parse_manifest_name(compacted_manifest_name(QUERY, 99))
    assert compacted is not None and (compacted.query_id, compacted.batch_id) == (QUERY, 99)
    assert compacted.compacted
    legacy = parse_manifest_name(manifest_name(3))
    assert legacy is not None and (legacy.query_id, legacy.batch_id) == (None, 3)
    assert parse_manifest_name(f".{manifest_name(3, QUERY)}.0123abcd.tmp") is None


# --- the layout of older versions -----------------------------------------------------------------


def _legacy_item(out: Path, batch_id: int, partition: int, rows: int, *, final: bool) -> dict:
    """A file exactly as an older version staged it (or renamed it, ``final``), and its item."""
    staged = f"{STAGING_DIR}/{batch_id}/part-{partition:05d}-0-0123456789ab.parquet"
    name = f"part-{batch_id:010d}-{partition:05d}.parquet"
    path = out / (name if final else staged)
    path.parent.mkdir(parents=True, exist_ok=True)
    start = 100_000 + batch_id * 1000 + partition * 100
    pq.write_table(pa.Table.from_batches([_chunk(start, rows)]), path)
    return {
        "staged": staged,
        "final": name,
        "rows": rows,
        "bytes": path.stat().st_size,
        "partition": partition,
    }


def _legacy_manifest(out: Path, batch_id: int, items: list[dict]) -> None:
    """A manifest entry exactly as an older version wrote it (no query id, no time)."""
    entry = {
        "version": 1,
        "batchId": batch_id,
        "schema": json.loads(SCHEMA.json()),
        "files": [{"path": i["final"], "rows": i["rows"], "bytes": i["bytes"]} for i in items],
    }
    (out / MANIFEST_DIR).mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_DIR / f"{batch_id:010d}.json").write_text(json.dumps(entry, sort_keys=True))


def test_a_query_restarted_from_an_older_checkpoint_continues_its_legacy_output(
    tmp_path: Path,
) -> None:
    from unaligned.sink.recovery import recover

    out = tmp_path / "out"
    log = _log(tmp_path, "ck")
    # An older version committed batches 0 and 1, decided batch 2 and crashed before its
    # renames, and crashed in batch 3 before deciding it. Batch 9 is some other legacy writer's.
    for batch_id in (0, 1):
        items = [_legacy_item(out, batch_id, p, 2, final=True) for p in (0, 1)]
        log.write(CommitRecord(batch_id, "files", tuple(items), 0))
        _legacy_manifest(out, batch_id, items)
        log.mark_done(batch_id)
    decided = [_legacy_item(out, 2, p, 2, final=False) for p in (0, 1)]
    log.write(CommitRecord(2, "files", tuple(decided), 0))
    crashed = _legacy_item(out, 3, 0, 2, final=False)
    foreign = _legacy_item(out, 9, 0, 2, final=False)
    legacy_rows = sorted(
        100_000 + b * 1000 + p * 100 + i for b in (0, 1, 2) for p in (0, 1) for i in (0, 1)
    )

    # The new version restarts the same query: recovery rolls batch 2 forward under its legacy
    # names (one entry for the batch, not a second one with the query id).
    participant = _participant(tmp_path)
    recover(log, participant)
    assert log.unfinished_batch_ids() == []
    assert (out / MANIFEST_DIR / manifest_name(2)).is_file()
    assert not (out / MANIFEST_DIR / manifest_name(2, QUERY)).exists()
    assert (out / decided[0]["final"]).is_file()
    assert _read_ids(tmp_path) == legacy_rows
    assert (out / crashed["staged"]).is_file()  # batch 3 is not done in this query's log (yet)

    # Spark re-runs batch 3 under the new names; then the legacy leftover of batch 3 is removed.
    _publish(participant, log, 3)
    assert not (out / crashed["staged"]).exists()
    assert (out / foreign["staged"]).is_file()  # never this query's
    new_rows = [p * 1000 + i for p in (0, 1) for i in range(3)]
    assert _read_ids(tmp_path) == sorted(legacy_rows + new_rows)
    assert participant.committed_batch_ids() == [3]


def test_legacy_participant_keeps_writing_the_legacy_layout(tmp_path: Path) -> None:
    participant = _participant(tmp_path, query_id=None)
    items = _publish(participant, _log(tmp_path, "ck"), 4)
    assert items[0]["final"] == final_name(4, 0) == "part-0000000004-00000.parquet"
    assert "queryId" not in items[0]
    assert (tmp_path / "out" / MANIFEST_DIR / "0000000004.json").is_file()
    assert participant.committed_batch_ids() == [4]


def test_a_record_of_another_query_is_refused(tmp_path: Path) -> None:
    other = _participant(tmp_path, query_id=OTHER)
    items = [_prepare(other, 0, 0, 3)]
    with pytest.raises(CommitLogError, match="names files of query"):
        _participant(tmp_path).finish_batch(CommitRecord(0, "files", tuple(items), 0))


# --- manifest compaction --------------------------------------------------------------------------


def _manifest_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "out" / MANIFEST_DIR).glob("*.json"))


def test_compaction_bounds_the_manifest_and_keeps_every_row(tmp_path: Path) -> None:
    participant = _participant(tmp_path, manifest_retain=3, compact_every=2)
    other = _participant(tmp_path, query_id=OTHER, manifest_retain=3, compact_every=2)
    log, other_log = _log(tmp_path, "ck"), _log(tmp_path, "ck-other")
    _publish(other, other_log, 0)
    counts = []
    for batch_id in range(20):
        _publish(participant, log, batch_id, rows=2, partitions=1)
        counts.append(sum(1 for n in _manifest_files(tmp_path) if n.startswith(QUERY)))
    assert max(counts) <= 3 + 2 + 1  # retained + not yet folded + one compacted file
    names = [n for n in _manifest_files(tmp_path) if n.startswith(QUERY)]
    compacted = [n for n in names if n.endswith(".compacted.json")]
    assert len(compacted) == 1
    assert [n for n in names if n not in compacted] == [
        manifest_name(b, QUERY) for b in range(20 - len(names) + 1, 20)
    ]
    assert manifest_name(0, OTHER) in _manifest_files(tmp_path)  # another query's: untouched
    assert participant.committed_batch_ids() == list(range(20))
    assert _read_ids(tmp_path) == sorted(
        [0, 1] * 20 + [p * 1000 + i for p in (0, 1) for i in range(3)]
    )
    doc = json.loads((tmp_path / "out" / MANIFEST_DIR / compacted[0]).read_text())
    assert doc["queryId"] == QUERY and doc["compacted"] is True
    assert [b["batchId"] for b in doc["batches"]] == list(range(doc["throughBatchId"] + 1))


def test_compaction_leaves_unfinished_batches_and_legacy_entries(tmp_path: Path) -> None:
    participant = _participant(tmp_path, manifest_retain=1, compact_every=1)
    log = _log(tmp_path, "ck")
    _legacy_manifest(tmp_path / "out", 0, [_legacy_item(tmp_path / "out", 0, 0, 1, final=True)])
    for batch_id in range(1, 4):
        if batch_id == 2:  # decided and published, but the done marker was never written
            items = [_prepare(participant, 2, 0, 3)]
            log.write(CommitRecord(2, "files", tuple(items), 0))
            participant.commit(items, 2, lambda n: None)
            participant.finish_batch(CommitRecord(2, "files", tuple(items), 0))
        else:
            _publish(participant, log, batch_id, partitions=1)
    names = _manifest_files(tmp_path)
    assert names == sorted(
        [
            manifest_name(0),
            compacted_manifest_name(QUERY, 1),
            manifest_name(2, QUERY),
            manifest_name(3, QUERY),
        ]
    )
    assert participant.committed_batch_ids() == [1, 2, 3]


def test_a_compaction_that_finds_a_listed_file_gone_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unaligned.sink import committed_files

    participant = _participant(tmp_path, manifest_retain=1, compact_every=1)
    log = _log(tmp_path, "ck")
    for batch_id in range(2):
        _publish(participant, log, batch_id, partitions=1)
    before = _manifest_files(tmp_path)

    def gone(output: object, name: object) -> None:
        raise FileNotFoundError("folded by another compaction")

    monkeypatch.setattr(committed_files, "read_manifest_file", gone)
    _publish(participant, log, 2, partitions=1)  # 3 live entries: would compact
    assert _manifest_files(tmp_path) == sorted([*before, manifest_name(2, QUERY)])
    monkeypatch.undo()
    assert participant.compact_manifest(set(), None) == 2
    assert participant.committed_batch_ids() == [0, 1, 2]
