"""Attempts Spark never takes, on real tables (deltalake, pyiceberg's SQLite catalog): a zombie
attempt that writes its data files after its batch was decided, committed and cleaned up
leaves nothing in the data folder. The protocol's writer runs as in a task (a stand-in
TaskContext); the table is read back by the formats' own libraries (``table_readers``).

The same faults on a real cluster: ``integration/test_cluster_faults.py``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from table_readers import TableUnderTest
from task_context import FakeTaskContext
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.participant import TaskOutcome
from unaligned.sink.stream_writer_factory import build_stream_writer
from unaligned.sink.two_phase_commit import TwoPhaseCommitWriter
from unaligned.sink.writer_role import PLANNER_MODULE

SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])
QUERY_ID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


@pytest.fixture(params=["delta", "iceberg"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> TableUnderTest:
    return TableUnderTest.make(str(request.param), tmp_path)


def _checkpoint(root: Path) -> Path:
    """What Spark writes before batch 0 runs: the query's metadata and the batch's offsets."""
    checkpoint = root / "ck"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": QUERY_ID}))
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000), "conf": {}}
    source = {"offsets": {}, "idleBarrier": 0}
    lines = ["v1", *(json.dumps(doc, separators=(",", ":")) for doc in (metadata, source))]
    (checkpoint / "offsets" / "0").write_text("\n".join(lines))
    return checkpoint


def _rows(start: int, count: int) -> pa.RecordBatch:
    ids = list(range(start, start + count))
    return pa.record_batch(
        [pa.array(ids, pa.int64()), pa.array([f"r{i}" for i in ids])],
        schema=pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())]),
    )


def _in_planner(build: Callable[[], Any]) -> Any:
    """Build the writer as Spark's planner does (it creates the table and keeps its layout)."""
    namespace: dict[str, Any] = {"__name__": PLANNER_MODULE, "build": build}
    exec("def call():\n    return build()\n", namespace)
    return namespace["call"]()


def test_a_zombie_that_writes_after_its_batch_was_cleaned_up_leaves_no_file(
    table: TableUnderTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 of task 0 (speculative, or of a failed stage) starts before batch 0 is decided
    and gets its rows (so it opens its writer), but the winner's attempt 0 is decided,
    committed and cleaned up before the zombie's data file exists (a table task writes its
    files when it prepares). Nothing would ever name or delete that file: the zombie must."""
    import pyspark

    checkpoint = _checkpoint(tmp_path)
    options = {"checkpointlocation": str(checkpoint), "chunkrows": "5"}
    options.update({k.lower(): v for k, v in table.sink_options().items()})
    writer: TwoPhaseCommitWriter = _in_planner(lambda: build_stream_writer(options, SCHEMA))

    def run_as(attempt: int, batches: Iterator[pa.RecordBatch]) -> Any:
        context = FakeTaskContext(0, 0, attempt, QUERY_ID)
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: context))
        return writer.write(batches)

    winner = run_as(0, iter([_rows(0, 10)]))
    assert winner.outcome is TaskOutcome.PREPARED

    def zombie_input() -> Iterator[pa.RecordBatch]:
        yield _rows(0, 5)  # the zombie opens its writer with these rows
        writer.commit([winner], 0)  # meanwhile the batch is decided, committed, cleaned up
        yield _rows(5, 5)

    zombie = run_as(1, zombie_input())
    assert CommitLog(Checkpoint.resolve(str(checkpoint))).is_done(0)
    assert sorted(table.read().column("id").to_pylist()) == list(range(10))
    leftovers = table.files_on_disk() - table.files_in_table()
    assert leftovers == set(), f"data files no snapshot or log names: {sorted(leftovers)}"
    assert zombie.outcome is TaskOutcome.ALREADY_DECIDED and zombie.prepared is None
