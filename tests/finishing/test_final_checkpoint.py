"""The final checkpoint's pieces: EndOfData in the offset log and the finished marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unaligned.barriers.barrier import end_of_data
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError
from unaligned.finishing.final_checkpoint import (
    at_rest,
    clear_stale_marker,
    finished_batch,
    has_finished,
    mark_finished,
)

TOKEN = {"barrierToken": "t"}


@pytest.mark.parametrize(
    "offsets, expected",
    [
        ([{**TOKEN, "endOfData": True}], True),
        ([{**TOKEN, "endOfData": True}, {**TOKEN, "endOfData": True}], True),
        ([{**TOKEN, "endOfData": True}, {**TOKEN}], False),  # one source still has data
        ([{**TOKEN}], False),
        ([{"endOfData": True}], False),  # not a format("unaligned") offset
        ([3, None, {**TOKEN, "endOfData": True}], True),  # other sources do not finish
        ([], False),
    ],
)
def test_end_of_data_needs_every_unaligned_source(offsets: list[object], expected: bool) -> None:
    assert end_of_data(offsets) is expected


def test_the_finished_marker_names_the_final_batch(tmp_path: Path) -> None:
    assert finished_batch(Checkpoint.resolve(str(tmp_path))) is None
    mark_finished(Checkpoint.resolve(str(tmp_path)), 7)
    mark_finished(Checkpoint.resolve(str(tmp_path)), 7)  # idempotent (a roll-forward after a crash)
    assert finished_batch(Checkpoint.resolve(str(tmp_path))) == 7


def test_a_finished_marker_changed_after_it_was_written_is_an_error_naming_it(
    tmp_path: Path,
) -> None:
    mark_finished(Checkpoint.resolve(str(tmp_path)), 7)
    path = tmp_path / "unaligned" / "finished.json"
    document = json.loads(path.read_text())
    document["finalBatchId"] = 9
    path.write_text(json.dumps(document))
    with pytest.raises(CommitLogError, match=f"finished marker {path}: its content does not match"):
        finished_batch(Checkpoint.resolve(str(tmp_path)))
    document.pop("checksum")  # a deliberate edit, its checksum removed: read as it is
    path.write_text(json.dumps(document))
    assert finished_batch(Checkpoint.resolve(str(tmp_path))) == 9


def spark_logs(checkpoint: Path, planned: int, committed: int | None) -> None:
    """Spark's offset log up to batch ``planned`` and commit log up to ``committed``."""
    for directory, last in (("offsets", planned), ("commits", committed)):
        (checkpoint / directory).mkdir(exist_ok=True)
        for batch in range(0, -1 if last is None else last + 1):
            (checkpoint / directory / str(batch)).write_text("v1\n{}")
        (checkpoint / directory / f".{last}.crc").write_text("")  # Hadoop's checksum files


def test_a_query_has_finished_once_spark_committed_its_final_batch_and_none_came_after(
    tmp_path: Path,
) -> None:
    checkpoint = str(tmp_path)
    spark_logs(tmp_path, planned=4, committed=3)
    mark_finished(Checkpoint.resolve(checkpoint), 4)
    assert Checkpoint.resolve(checkpoint).last_logged_batch() == 4
    assert not at_rest(Checkpoint.resolve(checkpoint)) and not has_finished(
        Checkpoint.resolve(checkpoint)
    )  # Spark has not recorded it
    spark_logs(tmp_path, planned=4, committed=4)
    assert at_rest(Checkpoint.resolve(checkpoint)) and has_finished(Checkpoint.resolve(checkpoint))
    spark_logs(tmp_path, planned=5, committed=4)  # a later batch: the marker is stale
    assert not has_finished(Checkpoint.resolve(checkpoint))


def test_a_later_barrier_removes_a_stale_marker_and_only_a_stale_one(tmp_path: Path) -> None:
    checkpoint = str(tmp_path)
    clear_stale_marker(Checkpoint.resolve(checkpoint), 3)  # no marker: nothing to do
    mark_finished(Checkpoint.resolve(checkpoint), 4)
    clear_stale_marker(Checkpoint.resolve(checkpoint), 4)  # the final batch itself (an idle re-run)
    assert finished_batch(Checkpoint.resolve(checkpoint)) == 4
    clear_stale_marker(Checkpoint.resolve(checkpoint), 5)
    assert finished_batch(Checkpoint.resolve(checkpoint)) is None


def test_a_checkpoint_without_spark_logs_is_at_rest_and_not_finished(tmp_path: Path) -> None:
    assert Checkpoint.resolve(str(tmp_path)).last_logged_batch() is None
    assert at_rest(Checkpoint.resolve(str(tmp_path))) and not has_finished(
        Checkpoint.resolve(str(tmp_path))
    )
