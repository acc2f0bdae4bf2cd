"""The file sink's steps with test defaults (a participant, a task's prepare, a whole published
batch) and files exactly as older versions wrote them: shared by the file participant and file
manifest unit tests (importable because pyproject puts tests/ on the path)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.files.committed_files import read_committed_files
from unaligned.sink.files.file_manifest import MANIFEST_DIR
from unaligned.sink.files.file_participant import FileParticipant
from unaligned.sink.options import FileTarget

SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])
ARROW = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])
QUERY = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
OTHER = "99999999-dddd-eeee-ffff-012345678901"


def chunk(start: int, rows: int) -> pa.RecordBatch:
    ids = list(range(start, start + rows))
    return pa.record_batch(
        [pa.array(ids, pa.int64()), pa.array([str(i) for i in ids])], schema=ARROW
    )


def make_participant(
    tmp_path: Path,
    compression: str = "snappy",
    query_id: str | None = QUERY,
    *,
    retention_ms: int | None = None,
    merge_files_below: int = 0,
    log_compact_interval: int = 10,
    **kwargs: int,
) -> FileParticipant:
    target = FileTarget(
        str(tmp_path / "out"),
        compression,
        retention_ms=retention_ms,
        log_compact_interval=log_compact_interval,
        merge_files_below=merge_files_below,
    )
    return FileParticipant(target, SCHEMA, query_id, **kwargs)


def prepare_item(
    participant: FileParticipant, batch_id: int, partition: int, rows: int, attempt: int = 0
) -> dict:
    task = participant.open_task(batch_id, partition, attempt)
    for start in range(0, rows, 10):
        task.write_chunk(chunk(partition * 1000 + start, min(10, rows - start)))
        task.between_chunks()
    item = task.prepare()
    task.close()
    return item


def publish_batch(
    participant: FileParticipant,
    log: CommitLog,
    batch_id: int,
    rows: int = 3,
    partitions: int = 2,
    decided_at_ms: int = 0,
) -> list[dict]:
    """What the driver does for a batch: decide, rename, publish, mark done, clean up."""
    items = participant.consolidate(
        [prepare_item(participant, batch_id, p, rows) for p in range(partitions)], batch_id
    )
    record = CommitRecord(batch_id, "files", tuple(items), decided_at_ms)
    log.write(record)
    participant.commit(items, batch_id, lambda n: None)
    participant.finish_batch(record)
    log.mark_done(batch_id)
    participant.clean_up(log, batch_id)
    return items


def read_ids(tmp_path: Path) -> list[int]:
    return sorted(read_committed_files(str(tmp_path / "out")).column("id").to_pylist())


def commit_log(tmp_path: Path, name: str) -> CommitLog:
    return CommitLog(Checkpoint.resolve(str(tmp_path / name)))


def manifest_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "out" / MANIFEST_DIR).glob("*.json"))
