"""A table participant driven through the protocol's steps in one process (no Spark): the
planner's check, tasks writing chunks, the driver's decision and commit. Shared by the unit
tests (``tests/sink/tables/``) and ``benchmarks/bench_table_commits.py``."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)

from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import SinkOptions
from unaligned.sink.tables.table_participant import TableParticipant

SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("ts", TimestampType()),
    ]
)


def sink_options(fmt: str, root: Path, checkpoint: Path, **extra: str) -> dict[str, str]:
    options = {"checkpointLocation": str(checkpoint), "tableFormat": fmt, **extra}
    if fmt == "delta":
        return {**options, "path": str(root / "table")}
    return {**options, "path": "db.events", "catalog.warehouse": str(root / "warehouse")}


def new_checkpoint(root: Path) -> Path:
    checkpoint = root / f"checkpoint-{uuid.uuid4().hex[:6]}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    return checkpoint


def participant(options: Mapping[str, str], schema: StructType = SCHEMA) -> TableParticipant:
    parsed = SinkOptions.parse(options)
    made = TableParticipant.for_query(parsed.target, schema, parsed.checkpoint)  # type: ignore[arg-type]
    made.check_at_query_start()
    return made


def rows(task: int, batch: int, n: int = 5) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([b"k"] * n),
            "value": pa.array([f"{batch}:{task}:{i}".encode() for i in range(n)]),
            "partition": pa.array([task] * n, pa.int32()),
            "offset": pa.array(range(batch * n, batch * n + n), pa.int64()),
            "ts": pa.array(
                [
                    dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=i % 28)
                    for i in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def write_tasks(
    made: TableParticipant, batch: int, tasks: int = 2, attempt: int = 0
) -> list[dict[str, Any]]:
    items = []
    for task in range(tasks):
        writer = made.open_task(batch, task, attempt)
        writer.write_chunk(rows(task, batch))
        items.append(writer.prepare())
        writer.close()
    return items


def decide_and_commit(
    made: TableParticipant, log: CommitLog, batch: int, items: Sequence[dict[str, Any]]
) -> None:
    made.check_decidable(items, batch)
    assert log.write(CommitRecord(batch, made.kind, tuple(items), 0))
    made.commit(items, batch, lambda n: None)
    log.mark_done(batch)
    made.clean_up(log, batch)
