"""Decide, commit, roll forward and recover on commit records, without Spark or a broker: the
file participant on a local directory and task commit messages built directly."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from unaligned._util.crash_points import CrashPoint
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError, TransactionCommitError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.files.committed_files import read_committed_files
from unaligned.sink.files.file_manifest import STAGING_DIR
from unaligned.sink.files.file_participant import FileParticipant
from unaligned.sink.options import FileTarget
from unaligned.sink.participant import SinkCommitMessage, TaskOutcome
from unaligned.sink.recovery import commit_record, prepared_items, recover, roll_forward

SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])
ARROW = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])


def _participant(tmp_path: Path) -> FileParticipant:
    return FileParticipant(FileTarget(str(tmp_path / "out"), "snappy"), SCHEMA, "q-1")


def _log(tmp_path: Path) -> CommitLog:
    return CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))


def _prepare(
    participant: FileParticipant, batch_id: int, partition: int, start: int, rows: int
) -> dict:
    """Step 1 of one task attempt: rows ``start .. start + rows - 1`` in one staged file."""
    task = participant.open_task(batch_id, partition, 0)
    ids = list(range(start, start + rows))
    columns = [pa.array(ids, pa.int64()), pa.array([f"r{i}" for i in ids])]
    task.write_chunk(pa.record_batch(columns, schema=ARROW))
    task.between_chunks()
    item = task.prepare()
    task.close()
    return item


def _ids(tmp_path: Path) -> list[int]:
    table = read_committed_files(str(tmp_path / "out"))
    return sorted(table.column("id").to_pylist()) if table.num_columns else []


def _staging_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "out" / STAGING_DIR).rglob("*") if p.is_file()]


def _message(
    batch_id: int,
    partition: int,
    prepared: Mapping[str, Any] | None,
    outcome: TaskOutcome = TaskOutcome.PREPARED,
) -> SinkCommitMessage:
    return SinkCommitMessage(batch_id, partition, 0, 1, outcome, prepared)


# --- step 2b: decide ------------------------------------------------------------------------------


def test_prepared_items_skip_empty_tasks_in_partition_order() -> None:
    messages = [
        _message(7, 2, {"id": "c", "partition": 2}),
        _message(7, 0, None, TaskOutcome.EMPTY),
        _message(7, 1, {"id": "b", "partition": 1}),
    ]
    assert prepared_items(messages, 7) == [{"id": "b", "partition": 1}, {"id": "c", "partition": 2}]
    assert prepared_items([], 7) == []


@pytest.mark.parametrize(
    "messages, match",
    [
        (
            [_message(7, 0, {"partition": 0}), None],
            "commit got NoneType instead of a task's commit message",
        ),
        (
            [_message(3, 0, {"partition": 0})],
            "batch 7: commit got a message of batch 3 \\(partition 0\\)",
        ),
        (
            [_message(7, 0, {"partition": 0}), _message(7, 0, None, TaskOutcome.EMPTY)],
            "two commit messages for partition 0",
        ),
        (
            [_message(7, 4, None, TaskOutcome.ALREADY_DECIDED)],
            "partition 4 found a commit record for the batch, but the driver found none",
        ),
    ],
)
def test_prepared_items_refuse_to_decide_on_inconsistent_messages(
    messages: Sequence[SinkCommitMessage | None], match: str
) -> None:
    with pytest.raises(CommitLogError, match=match):
        prepared_items(messages, 7)


# --- steps 2c-2d: commit what a record names ------------------------------------------------------


def test_a_refused_commit_names_the_record_and_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    participant = _participant(tmp_path)
    log = _log(tmp_path)
    record = CommitRecord(0, "files", (_prepare(participant, 0, 0, 0, 5),), 0)
    log.write(record)

    def refuse(
        items: Sequence[Mapping[str, Any]], batch_id: int, progress: Callable[[int], None]
    ) -> None:
        raise TransactionCommitError("the broker refused t-0")

    monkeypatch.setattr(participant, "commit", refuse)
    with pytest.raises(TransactionCommitError) as raised:
        commit_record(log, participant, record, CrashPoint.DRIVER_PARTIAL_COMMIT)
    assert str(raised.value).startswith(
        f"the broker refused t-0. Commit record: {log.describe(0)}."
    )
    assert "unaligned.sink.recovery.roll_forward" in str(raised.value)
    assert _ids(tmp_path) == []  # finish_batch (the manifest entry) never ran


# --- step 3: roll forward and recover ------------------------------------------------------------


def test_roll_forward_twice_is_harmless(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    log = _log(tmp_path)
    items = tuple(_prepare(participant, 0, p, p * 10, 10) for p in range(2))
    log.write(CommitRecord(0, "files", items, 0))
    roll_forward(log, participant, 0)
    assert log.is_done(0)
    roll_forward(log, participant, 0)
    assert _ids(tmp_path) == list(range(20))
    assert _staging_files(tmp_path) == []


def test_roll_forward_needs_a_record_of_the_same_sink(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    log = _log(tmp_path)
    with pytest.raises(CommitLogError, match="batch 3 has no commit record to roll forward"):
        roll_forward(log, participant, 3)
    log.write(CommitRecord(0, "kafka", (), 0))
    other_sink = "by the 'kafka' sink, but this query writes with the 'files' sink"
    with pytest.raises(CommitLogError, match=other_sink):
        roll_forward(log, participant, 0)
    assert not log.is_done(0)


def test_recovery_rolls_forward_decided_and_removes_undecided(tmp_path: Path) -> None:
    participant = _participant(tmp_path)
    log = _log(tmp_path)
    decided = [_prepare(participant, 1, p, p * 10, 10) for p in range(3)]
    log.write(CommitRecord(1, "files", tuple(decided), 0))
    # Crash in the middle of the renames: the first file already has its final name.
    participant.commit(decided[:1], 1, lambda n: None)
    # Batch 2 was prepared but never decided.
    _prepare(participant, 2, 0, 500, 10)
    recover(log, participant)
    assert _ids(tmp_path) == list(range(30))
    assert _staging_files(tmp_path) == []
    assert log.unfinished_batch_ids() == []
