"""Compacting a query's manifest: bounded files, unfinished batches left alone, a compaction
racing another, retention (Spark's SPARK-27188), and the marks a compacted file keeps."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from file_sink_steps import (
    OTHER,
    QUERY,
    commit_log,
    make_participant,
    manifest_files,
    prepare_item,
    publish_batch,
    read_ids,
)
from unaligned._util.fs import resolve_location
from unaligned.sink.commit_log import CommitRecord
from unaligned.sink.files.file_manifest import (
    MANIFEST_DIR,
    compacted_manifest_name,
    final_name,
    manifest_name,
)
from unaligned.sink.files.manifest_compaction import log_position


def test_compaction_bounds_the_manifest_and_keeps_every_row(tmp_path: Path) -> None:
    participant = make_participant(tmp_path, manifest_retain=3, compact_every=2)
    other = make_participant(tmp_path, query_id=OTHER, manifest_retain=3, compact_every=2)
    log, other_log = commit_log(tmp_path, "ck"), commit_log(tmp_path, "ck-other")
    publish_batch(other, other_log, 0)
    counts = []
    for batch_id in range(20):
        publish_batch(participant, log, batch_id, rows=2, partitions=1)
        counts.append(sum(1 for n in manifest_files(tmp_path) if n.startswith(QUERY)))
    assert max(counts) <= 3 + 2 + 1  # retained + not yet folded + one compacted file
    names = [n for n in manifest_files(tmp_path) if n.startswith(QUERY)]
    compacted = [n for n in names if n.endswith(".compacted.json")]
    assert len(compacted) == 1
    assert [n for n in names if n not in compacted] == [
        manifest_name(b, QUERY) for b in range(20 - len(names) + 1, 20)
    ]
    assert manifest_name(0, OTHER) in manifest_files(tmp_path)  # another query's: untouched
    assert participant.committed_batch_ids() == list(range(20))
    assert read_ids(tmp_path) == sorted(
        [0, 1] * 20 + [p * 1000 + i for p in (0, 1) for i in range(3)]
    )
    doc = json.loads((tmp_path / "out" / MANIFEST_DIR / compacted[0]).read_text())
    assert doc["queryId"] == QUERY and doc["compacted"] is True
    assert [b["batchId"] for b in doc["batches"]] == list(range(doc["throughBatchId"] + 1))


def test_compaction_leaves_unfinished_batches(tmp_path: Path) -> None:
    participant = make_participant(tmp_path, manifest_retain=1, compact_every=1)
    log = commit_log(tmp_path, "ck")
    for batch_id in range(1, 4):
        if batch_id == 2:  # decided and published, but the done marker was never written
            items = [prepare_item(participant, 2, 0, 3)]
            log.write(CommitRecord(2, "files", tuple(items), 0))
            participant.commit(items, 2, lambda n: None)
            participant.finish_batch(CommitRecord(2, "files", tuple(items), 0))
        else:
            publish_batch(participant, log, batch_id, partitions=1)
    names = manifest_files(tmp_path)
    assert names == sorted(
        [
            compacted_manifest_name(QUERY, 1),
            manifest_name(2, QUERY),
            manifest_name(3, QUERY),
        ]
    )
    assert participant.committed_batch_ids() == [1, 2, 3]


def test_a_compaction_that_finds_a_listed_file_gone_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unaligned.sink.files import manifest_compaction

    participant = make_participant(tmp_path, manifest_retain=1, compact_every=1)
    log = commit_log(tmp_path, "ck")
    for batch_id in range(2):
        publish_batch(participant, log, batch_id, partitions=1)
    before = manifest_files(tmp_path)

    def gone(output: object, name: object) -> None:
        raise FileNotFoundError("folded by another compaction")

    monkeypatch.setattr(manifest_compaction, "read_manifest_file", gone)
    publish_batch(participant, log, 2, partitions=1)  # 3 live entries: would compact
    assert manifest_files(tmp_path) == sorted([*before, manifest_name(2, QUERY)])
    monkeypatch.undo()
    assert participant.compact_manifest(set(), None) == 2
    assert participant.committed_batch_ids() == [0, 1, 2]


def test_retention_drops_old_batches_at_a_compaction_and_leaves_their_files(
    tmp_path: Path,
) -> None:
    participant = make_participant(
        tmp_path, retention_ms=60_000, manifest_retain=2, compact_every=2, log_compact_interval=4
    )
    log = commit_log(tmp_path, "ck")
    now = int(time.time() * 1000)
    for batch_id in range(8):
        decided = now - 3_600_000 if batch_id < 5 else now  # batches 0-4 decided an hour ago
        publish_batch(participant, log, batch_id, rows=1, partitions=1, decided_at_ms=decided)
    assert participant.committed_batch_ids() == [5, 6, 7]
    assert read_ids(tmp_path) == [0, 0, 0]
    out = tmp_path / "out"
    assert len(list(out.glob("*.parquet"))) == 8  # like Spark's sink: files stay on disk
    compacted = [n for n in manifest_files(tmp_path) if n.endswith(".compacted.json")]
    doc = json.loads((out / MANIFEST_DIR / compacted[0]).read_text())
    assert doc["expiredThroughBatchId"] == 4
    assert doc["sparkLog"] >= 4
    # _spark_metadata compacted at log id 7 and left this query's expired entries out.
    logged = {str(line["path"]) for line in participant.spark_log().all_lines()}
    assert logged == {f"file:{out}/{final_name(b, 0, QUERY)}" for b in (5, 6, 7)}


def test_a_compacted_file_whose_batches_all_expired_keeps_the_log_position(
    tmp_path: Path,
) -> None:
    participant = make_participant(tmp_path, retention_ms=1, manifest_retain=1, compact_every=1)
    log = commit_log(tmp_path, "ck")
    for batch_id in range(3):
        publish_batch(participant, log, batch_id, partitions=1, decided_at_ms=1)
    assert participant.committed_batch_ids() == []
    assert manifest_files(tmp_path) == [compacted_manifest_name(QUERY, 2)]
    assert log_position(resolve_location(str(tmp_path / "out")), QUERY, 3).log_id == 2
    publish_batch(participant, log, 3, partitions=1, decided_at_ms=int(time.time() * 1000))
    assert len(participant.spark_log().all_lines()) == 4  # appended after the others, once


def test_entries_without_a_log_position_or_decision_time_are_read(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    log = commit_log(tmp_path, "ck")
    publish_batch(participant, log, 0)
    path = tmp_path / "out" / MANIFEST_DIR / manifest_name(0, QUERY)
    doc = json.loads(path.read_text())
    del doc["sparkLog"], doc["decidedAtMs"]
    path.write_text(json.dumps(doc))
    assert log_position(resolve_location(str(tmp_path / "out")), QUERY, 1).log_id == -1
    publish_batch(participant, log, 1)  # searches the whole log: batch 0's lines are not batch 1
    assert participant.committed_batch_ids() == [0, 1]
    assert len(participant.spark_log().all_lines()) == 4
