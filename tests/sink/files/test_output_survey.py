"""What a file sink's output holds per query, and the files no reader names: orphans of a crash
whose checkpoint was deleted, files the retention left out, and their removal on request."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds

from file_sink_steps import (
    OTHER,
    QUERY,
    commit_log,
    make_participant,
    prepare_item,
    publish_batch,
    read_ids,
)
from unaligned.sink.commit_log import CommitRecord
from unaligned.sink.files.file_manifest import STAGING_DIR, final_name
from unaligned.sink.files.output_survey import is_file_sink_output, remove_orphans, survey_output


def _crash_during_the_renames_then_lose_the_checkpoint(tmp_path: Path) -> list[dict]:
    """Batches 0 and 1 committed; batch 2 decided, one of its two files renamed, then the
    driver died and the checkpoint was deleted: nothing will ever publish batch 2."""
    participant = make_participant(tmp_path)
    log = commit_log(tmp_path, "ck")
    for batch_id in range(2):
        publish_batch(participant, log, batch_id)
    items = [prepare_item(participant, 2, p, 3) for p in range(2)]
    log.write(CommitRecord(2, "files", tuple(items), 0))
    participant.commit(items[:1], 2, lambda n: None)
    return items


def test_a_renamed_file_no_manifest_and_no_log_names_is_an_orphan(tmp_path: Path) -> None:
    items = _crash_during_the_renames_then_lose_the_checkpoint(tmp_path)
    other = make_participant(tmp_path, query_id=OTHER)
    publish_batch(other, commit_log(tmp_path, "ck-other"), 0)
    prepare_item(other, 1, 0, 3)  # the other query's running batch: staged, not an orphan
    out = str(tmp_path / "out")
    assert is_file_sink_output(out) and not is_file_sink_output(str(tmp_path / "ck"))
    survey = survey_output(out)
    by_id = {q.query_id: q for q in survey.queries}
    mine = by_id[QUERY]
    assert mine.committed_batches == (0, 1) and mine.committed_files == 4
    assert mine.committed_rows == 12
    assert [f.name for f in mine.orphans] == [final_name(2, 0, QUERY)]
    assert mine.orphans[0].batch_id == 2 and mine.orphans[0].bytes == items[0]["bytes"]
    assert mine.staged_batches == (2,) and mine.staged_files == 1
    assert by_id[OTHER].orphans == () and by_id[OTHER].staged_batches == (1,)
    assert survey.spark_log_entries == 6  # 4 of ours, 2 of the other query's
    doc = survey.to_dict()
    assert doc["queries"][0]["orphans"][0]["name"] == final_name(2, 0, QUERY)  # type: ignore[index]
    # What a reader that lists the directory sees: the orphan's rows too.
    assert ds.dataset(out).count_rows() == len(read_ids(tmp_path)) + 3


def test_orphans_are_removed_only_for_the_queries_named(tmp_path: Path) -> None:
    _crash_during_the_renames_then_lose_the_checkpoint(tmp_path)
    other = make_participant(tmp_path, query_id=OTHER)
    in_flight = prepare_item(other, 0, 0, 3)
    out = tmp_path / "out"
    assert remove_orphans(str(out), {QUERY}, dry_run=True) == [
        final_name(2, 0, QUERY),
        f"{STAGING_DIR}/{QUERY}/",
    ]
    assert (out / final_name(2, 0, QUERY)).is_file()  # a dry run deletes nothing
    assert remove_orphans(str(out), {OTHER}) == [f"{STAGING_DIR}/{OTHER}/"]
    assert not (out / in_flight["staged"]).exists()
    remove_orphans(str(out), {QUERY})
    assert survey_output(str(out)).orphans == ()
    assert not (out / STAGING_DIR / QUERY).exists()
    assert ds.dataset(out).count_rows() == len(read_ids(tmp_path)) == 12


def test_files_the_retention_left_out_are_expired_not_orphans(tmp_path: Path) -> None:
    """Batches 0-2 left the manifest (compacted after batch 2) and ``_spark_metadata`` (its
    compaction at log id 3, which keeps the batch it adds): expired. Batches 3 and 4 are
    still named by the log, so no reader has lost them yet."""
    participant = make_participant(
        tmp_path, retention_ms=1, manifest_retain=1, compact_every=1, log_compact_interval=2
    )
    log = commit_log(tmp_path, "ck")
    for batch_id in range(5):
        publish_batch(participant, log, batch_id, partitions=1, decided_at_ms=1)
    out = str(tmp_path / "out")
    (query,) = survey_output(out).queries
    assert query.committed_batches == (3, 4) and query.expired_through == 2
    assert [f.batch_id for f in query.expired] == [0, 1, 2] and query.orphans == ()
    assert remove_orphans(out, None) == []
    assert len(remove_orphans(out, None, expired=True)) == 3
    assert ds.dataset(out).count_rows() == 6
