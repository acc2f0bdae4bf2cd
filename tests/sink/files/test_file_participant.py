"""The file participant: staging, deterministic final names, idempotent renames, the batch in
``_spark_metadata`` once and its manifest entry; names per query. Names and compaction
themselves: ``test_file_manifest.py``; the log's format: ``test_spark_metadata_log.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import StructType
from tests.sink.files.test_spark_metadata_log import count_listings

from file_sink_steps import (
    OTHER,
    QUERY,
    SCHEMA,
    commit_log,
    make_participant,
    prepare_item,
    publish_batch,
    read_ids,
)
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError, SinkConfigurationError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.files.file_manifest import MANIFEST_DIR, STAGING_DIR, final_name, manifest_name
from unaligned.sink.files.file_participant import FileParticipant
from unaligned.sink.files.spark_log_layout import SPARK_METADATA_DIR, LogPosition
from unaligned.sink.options import FileTarget


def _logged(participant: FileParticipant) -> list[str]:
    """The file names Spark's readers see (``_spark_metadata``)."""
    return [str(line["path"]).rsplit("/", 1)[1] for line in participant.spark_log().all_lines()]


def _entry(tmp_path: Path, batch_id: int, query_id: str = QUERY) -> dict:
    path = tmp_path / "out" / MANIFEST_DIR / manifest_name(batch_id, query_id)
    return json.loads(path.read_text())


def test_commit_renames_and_is_idempotent(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    items = [prepare_item(participant, 0, p, 10) for p in range(3)]
    progress: list[int] = []
    participant.commit(items, 0, progress.append)
    assert progress == [1, 2, 3]
    for item in items:
        assert (tmp_path / "out" / item["final"]).is_file()
        assert not (tmp_path / "out" / item["staged"]).exists()
    participant.commit(items, 0, lambda n: None)  # a roll-forward after a crash: no error


def test_commit_with_both_files_gone_is_loud(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    item = prepare_item(participant, 0, 0, 10)
    (tmp_path / "out" / item["staged"]).unlink()
    with pytest.raises(CommitLogError, match="10 rows are lost"):
        participant.commit([item], 0, lambda n: None)


def test_manifest_entry_names_the_files(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    items = [prepare_item(participant, 7, p, 5 + p) for p in (1, 0)]
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


def test_a_finished_batch_is_in_spark_metadata_once_at_its_decision_time(
    tmp_path: Path,
) -> None:
    participant = make_participant(tmp_path)
    items = [prepare_item(participant, 4, p, 5) for p in range(2)]
    record = CommitRecord(4, "files", tuple(items), 1_700_000_000_000)
    participant.commit(items, 4, lambda n: None)
    participant.finish_batch(record)
    participant.finish_batch(record)  # a roll-forward after a crash before the done marker
    lines = participant.spark_log().all_lines()
    assert [str(line["path"]) for line in lines] == [
        f"file:{tmp_path}/out/{final_name(4, p, QUERY)}" for p in range(2)
    ]
    assert {line["modificationTime"] for line in lines} == {1_700_000_000_000}
    assert [line["size"] for line in lines] == [item["bytes"] for item in items]
    assert _entry(tmp_path, 4)["sparkLog"] == 0
    assert _entry(tmp_path, 4)["decidedAtMs"] == 1_700_000_000_000


def test_a_crash_between_the_log_and_the_manifest_is_rolled_forward_without_a_second_entry(
    tmp_path: Path,
) -> None:
    participant = make_participant(tmp_path, log_compact_interval=2)
    log = commit_log(tmp_path, "ck")
    publish_batch(participant, log, 0)
    items = [prepare_item(participant, 1, p, 3) for p in range(2)]
    participant.commit(items, 1, lambda n: None)
    # Step 2d-i ran (the batch landed at log id 1, a compaction), then the driver died.
    participant.spark_log().append_batch(
        QUERY, 1, [(i["final"], i["bytes"]) for i in items], 0, LogPosition(0)
    )
    assert read_ids(tmp_path) == [0, 1, 2, 1000, 1001, 1002]  # ours: batch 0 only
    participant.finish_batch(CommitRecord(1, "files", tuple(items), 0))  # the roll-forward
    assert sorted(_logged(participant)) == sorted(
        final_name(b, p, QUERY) for b in (0, 1) for p in (0, 1)
    )
    assert sorted(p.name for p in (tmp_path / "out" / SPARK_METADATA_DIR).iterdir()) == [
        "0",
        "1.compact",
    ]
    assert _entry(tmp_path, 1)["sparkLog"] == 1


def test_a_roll_forward_by_look_ups_finds_the_append_a_crash_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once two compactions fixed the interval (log ids 2 and 5), a batch's append and its
    roll-forward find the log's end by look-ups, without listing: still one entry."""
    participant = make_participant(tmp_path, log_compact_interval=3)
    log = commit_log(tmp_path, "ck")
    for batch_id in range(6):
        publish_batch(participant, log, batch_id)
    assert _entry(tmp_path, 5)["sparkLogInterval"] == 3
    listings = count_listings(monkeypatch)
    items = [prepare_item(participant, 6, p, 3) for p in range(2)]
    participant.commit(items, 6, lambda n: None)
    files = [(i["final"], i["bytes"]) for i in items]
    assert participant.spark_log().append_batch(QUERY, 6, files, 0, LogPosition(5, 3)).log_id == 6
    participant.finish_batch(CommitRecord(6, "files", tuple(items), 0))  # the roll-forward
    assert listings == []
    assert _entry(tmp_path, 6)["sparkLog"] == 6
    assert sorted(_logged(participant)) == sorted(
        final_name(b, p, QUERY) for b in range(7) for p in (0, 1)
    )


def test_two_queries_share_one_log_and_each_batch_is_in_it_once(tmp_path: Path) -> None:
    first = make_participant(tmp_path, log_compact_interval=3)
    second = make_participant(tmp_path, query_id=OTHER, log_compact_interval=3)
    first_log, second_log = commit_log(tmp_path, "ck-1"), commit_log(tmp_path, "ck-2")
    for batch_id in range(7):
        publish_batch(first, first_log, batch_id)
        if batch_id % 2:
            publish_batch(second, second_log, batch_id, partitions=1)
    logged = _logged(first)
    assert len(logged) == len(set(logged)) == 7 * 2 + 3
    assert set(logged) == {p.name for p in (tmp_path / "out").glob("*.parquet")}
    positions = [_entry(tmp_path, b)["sparkLog"] for b in range(7)]
    assert positions == sorted(positions) and len(set(positions)) == 7


def test_an_empty_batch_adds_nothing_to_the_log(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    log = commit_log(tmp_path, "ck")
    publish_batch(participant, log, 0)
    publish_batch(participant, log, 1, partitions=0)
    publish_batch(participant, log, 2)
    assert [_entry(tmp_path, b)["sparkLog"] for b in range(3)] == [0, 0, 1]
    assert participant.committed_batch_ids() == [0, 1, 2]
    assert len(_logged(participant)) == 4


def test_abort_deletes_staged_files(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    item = prepare_item(participant, 0, 0, 10)
    participant.abort([item], 0)
    participant.abort([item], 0)  # twice is fine
    assert not (tmp_path / "out" / item["staged"]).exists()


def test_clean_up_keeps_staging_of_unfinished_decided_batches(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    decided = prepare_item(participant, 1, 0, 10)
    log.write(CommitRecord(1, "files", (decided,), 0))  # decided, not finished
    prepare_item(participant, 0, 0, 10)  # a leftover of batch 0
    prepare_item(participant, 2, 0, 10)  # undecided batch 2
    assert participant.clean_up(log, 1) == 1  # only batch 0
    assert (tmp_path / "out" / decided["staged"]).is_file()
    assert (tmp_path / "out" / STAGING_DIR / QUERY / "2").is_dir()
    assert participant.clean_up(log, None) == 1  # batch 2; batch 1 still kept
    assert (tmp_path / "out" / decided["staged"]).is_file()


def test_check_decidable_refuses_a_missing_staged_file(tmp_path: Path) -> None:
    participant = make_participant(tmp_path)
    items = [prepare_item(participant, 0, p, 10) for p in range(2)]
    participant.check_decidable(items, 0)  # both staged files are there
    (tmp_path / "out" / items[0]["staged"]).unlink()
    with pytest.raises(CommitLogError, match="batch 0 was not decided"):
        participant.check_decidable(items, 0)
    assert not (tmp_path / "out" / items[1]["staged"]).exists()  # every item aborted


# --- names per query -----------------------------------------------------------------------------


def test_two_queries_on_one_path_do_not_collide(tmp_path: Path) -> None:
    first, second = make_participant(tmp_path), make_participant(tmp_path, query_id=OTHER)
    first_log, second_log = commit_log(tmp_path, "ck-1"), commit_log(tmp_path, "ck-2")
    for batch_id in (0, 1):
        publish_batch(first, first_log, batch_id)
        publish_batch(second, second_log, batch_id)  # the same batch and partition numbers
    one_query = [p * 1000 + i for _ in (0, 1) for p in (0, 1) for i in range(3)]
    assert read_ids(tmp_path) == sorted(one_query * 2)  # every row of both, each once
    manifest = sorted(p.name for p in (tmp_path / "out" / MANIFEST_DIR).glob("*.json"))
    assert manifest == sorted(manifest_name(b, q) for b in (0, 1) for q in (QUERY, OTHER))
    assert len(list((tmp_path / "out").glob("part-*.parquet"))) == 8
    assert first.committed_batch_ids() == second.committed_batch_ids() == [0, 1]


def test_clean_up_and_recovery_touch_only_their_own_staging(tmp_path: Path) -> None:
    first, second = make_participant(tmp_path), make_participant(tmp_path, query_id=OTHER)
    first_log = commit_log(tmp_path, "ck-1")
    in_flight = prepare_item(second, 0, 0, 10)  # the other query's task, not decided yet
    leftover = prepare_item(first, 0, 0, 10)  # this query's failed attempt
    assert first.clean_up(first_log, None) == 1  # recovery: every batch, own staging only
    assert not (tmp_path / "out" / leftover["staged"]).exists()
    assert (tmp_path / "out" / in_flight["staged"]).is_file()
    publish_batch(first, first_log, 0)
    assert (tmp_path / "out" / in_flight["staged"]).is_file()


def test_a_query_id_that_cannot_name_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigurationError, match="cannot name files"):
        make_participant(tmp_path, query_id="a/b")


def test_for_query_reads_the_id_from_the_checkpoint(tmp_path: Path) -> None:
    target = FileTarget(str(tmp_path / "out"), "snappy")
    checkpoint = tmp_path / "ck"
    with pytest.raises(SinkConfigurationError, match="query id.*metadata does not exist"):
        FileParticipant.for_query(target, SCHEMA, Checkpoint.resolve(str(checkpoint)))
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
    assert (
        FileParticipant.for_query(target, SCHEMA, Checkpoint.resolve(str(checkpoint))).query_id
        == QUERY
    )


# --- the layout of older versions -----------------------------------------------------------------


def test_a_record_of_another_query_is_refused(tmp_path: Path) -> None:
    other = make_participant(tmp_path, query_id=OTHER)
    items = [prepare_item(other, 0, 0, 3)]
    with pytest.raises(CommitLogError, match="names files of query"):
        make_participant(tmp_path).finish_batch(CommitRecord(0, "files", tuple(items), 0))


def test_an_output_written_before_the_log_is_named_by_its_first_entry(tmp_path: Path) -> None:
    """Spark's readers read only ``_spark_metadata`` once it exists: the log's first id names
    every file committed before it, of every query."""
    import shutil

    participant, other = make_participant(tmp_path), make_participant(tmp_path, query_id=OTHER)
    log = commit_log(tmp_path, "ck")
    publish_batch(participant, log, 0)
    publish_batch(other, commit_log(tmp_path, "ck-other"), 0)
    shutil.rmtree(tmp_path / "out" / SPARK_METADATA_DIR)  # as an earlier version left it
    publish_batch(participant, log, 1)
    assert sorted(_logged(participant)) == sorted(
        p.name for p in (tmp_path / "out").glob("*.parquet")
    )
    assert len(_logged(participant)) == 6
