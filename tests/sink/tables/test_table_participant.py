"""The Iceberg and Delta participants, step by step against real tables (deltalake, pyiceberg
with its SQLite catalog): one commit per batch, never twice, nothing left behind."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from table_sink_steps import (
    SCHEMA,
    decide_and_commit,
    new_checkpoint,
    participant,
    sink_options,
    write_tasks,
)
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError, TableCommitError, TableSchemaError
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.tables.leftover_files import list_query_files

FORMATS = ["delta", "iceberg"]


def _read(made, fmt: str) -> pa.Table:  # type: ignore[no-untyped-def]
    target = made.table()
    if fmt == "delta":
        return target._table().to_pyarrow_table()
    return target.load().scan().to_arrow()


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_batch_is_one_commit_and_a_repeated_commit_adds_nothing(fmt: str, tmp_path: Path) -> None:
    checkpoint = new_checkpoint(tmp_path)
    made = participant(sink_options(fmt, tmp_path, checkpoint))
    tasks = pickle.loads(pickle.dumps(made))  # what Spark hands the tasks
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    for batch in range(2):
        decide_and_commit(made, log, batch, write_tasks(tasks, batch))
    record = log.read(1)
    assert record is not None
    made.commit(record.prepared, 1, lambda n: None)  # a roll-forward after the commit landed
    table = _read(made, fmt)
    assert table.num_rows == 20
    assert sorted(table.column("value").to_pylist()) == sorted(
        f"{b}:{t}:{i}".encode() for b in range(2) for t in range(2) for i in range(5)
    )
    assert made.committed()[0] == 1


def test_zombie_and_undecided_files_are_removed_and_never_committed(
    fmt: str, tmp_path: Path
) -> None:
    checkpoint = new_checkpoint(tmp_path)
    made = participant(sink_options(fmt, tmp_path, checkpoint))
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    decide_and_commit(made, log, 0, write_tasks(made, 0))
    write_tasks(made, 0, tasks=1, attempt=1)  # a zombie attempt of batch 0, after its decision
    write_tasks(made, 1)  # batch 1, never decided (the driver died)
    storage = made._storage()
    assert len(list_query_files(storage, made.query_id)) == 2 + 1 + 2
    assert made.clean_up(log, None) == 3
    assert sorted(b for b, _ in list_query_files(storage, made.query_id)) == [0, 0]
    assert _read(made, fmt).num_rows == 10


def test_a_missing_data_file_means_no_decision(fmt: str, tmp_path: Path) -> None:
    checkpoint = new_checkpoint(tmp_path)
    made = participant(sink_options(fmt, tmp_path, checkpoint))
    items = write_tasks(made, 0)
    storage = made._storage()
    storage.filesystem().delete_file(storage.child(items[0]["files"][0]["path"]))
    with pytest.raises(CommitLogError, match="was not decided"):
        made.check_decidable(items, 0)
    assert list_query_files(storage, made.query_id) == []  # the batch's other files aborted
    with pytest.raises(TableCommitError, match="missing"):
        made.commit(items, 0, lambda n: None)


def test_a_table_whose_schema_does_not_fit_is_refused_naming_the_columns(
    fmt: str, tmp_path: Path
) -> None:
    participant(sink_options(fmt, tmp_path, new_checkpoint(tmp_path)))
    other = StructType([*SCHEMA.fields, StructField("country", StringType())])
    with pytest.raises(TableSchemaError, match="column\\(s\\) the table lacks: country"):
        participant(sink_options(fmt, tmp_path, new_checkpoint(tmp_path)), other)
    merged = participant(
        sink_options(fmt, tmp_path, new_checkpoint(tmp_path), mergeSchema="true"), other
    )
    assert "country" in _read(merged, fmt).schema.names


def test_partitioned_tables_hold_one_partition_value_per_file(fmt: str, tmp_path: Path) -> None:
    checkpoint = new_checkpoint(tmp_path)
    by = "partition" if fmt == "delta" else "day(ts), partition"
    made = participant(sink_options(fmt, tmp_path, checkpoint, partitionBy=by))
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    items = write_tasks(made, 0)
    decide_and_commit(made, log, 0, items)
    files = [f for item in items for f in item["files"]]
    assert len(files) == (2 if fmt == "delta" else 10)
    if fmt == "delta":
        assert {f["path"].split("/")[0] for f in files} == {"partition=0", "partition=1"}
        assert _read(made, fmt).num_rows == 10
    else:
        table = made.table().load()
        late = table.scan(row_filter="ts >= '2024-01-04T00:00:00+00:00'").to_arrow()
        assert late.num_rows == 4
