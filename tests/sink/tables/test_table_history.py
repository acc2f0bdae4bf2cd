"""What keeps a table commit's cost flat as the table's history grows, against real tables:
the Iceberg lookup walks no further than this query's newest snapshot (other writers'
snapshots after it included), the one-copy transaction stages what pyiceberg's own stages,
manifests are merged, ``keepSnapshots`` expires old snapshots and the sink stays exactly-once;
Delta's kept table sees every commit made since it was loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from table_sink_steps import (
    decide_and_commit,
    new_checkpoint,
    participant,
    rows,
    sink_options,
    write_tasks,
)
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.tables.iceberg_history import (
    newest_batch,
    one_copy_transaction,
    snapshot_of,
)
from unaligned.sink.tables.schema_fit import conform_rows
from unaligned.sink.tables.table_participant import TableParticipant


def _committed(made: TableParticipant, checkpoint: Path, batches: range) -> CommitLog:
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    for batch in batches:
        decide_and_commit(made, log, batch, write_tasks(made, batch))
    return log


def _other_append(table: Any) -> None:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    table.append(conform_rows(rows(9, 9, n=3), schema_to_pyarrow(table.schema()), "t"))


def _iceberg(tmp_path: Path, **extra: str) -> tuple[TableParticipant, Path]:
    checkpoint = new_checkpoint(tmp_path)
    return participant(sink_options("iceberg", tmp_path, checkpoint, **extra)), checkpoint


def test_the_lookup_finds_our_batch_behind_other_writers_snapshots(tmp_path: Path) -> None:
    made, checkpoint = _iceberg(tmp_path)
    _committed(made, checkpoint, range(3))
    target = made.table()
    for _ in range(3):
        _other_append(target.load())
    table = target.load()
    with table.transaction() as txn:  # no marker: the lineage alone must answer
        txn.remove_properties(target.marker)
    table = target.load()
    assert target.marker not in table.properties
    assert newest_batch(table, made.query_id) == 2
    assert target.committed_batch() == 2
    ours = [s for s in table.snapshots() if s.summary.get("spark.sql.streaming.epochId")]
    assert snapshot_of(table, made.query_id, 2) == str(ours[-1].snapshot_id)
    assert snapshot_of(table, made.query_id, 0) == str(ours[0].snapshot_id)
    assert snapshot_of(table, made.query_id, 7) is None
    assert newest_batch(table, "another-query") is None
    # with the marker gone the sink still skips a batch the lineage holds
    assert target.commit_batch([], 2, {}) is False


def test_the_one_copy_transaction_stages_what_pyiceberg_stages(tmp_path: Path) -> None:
    from pyiceberg.table import Transaction

    made, checkpoint = _iceberg(tmp_path)
    _committed(made, checkpoint, range(2))
    table = made.table().load()
    ours, theirs = one_copy_transaction(table), Transaction(table)
    assert ours.table_metadata is table.metadata  # nothing staged: no copy
    for txn in (ours, theirs):
        txn.set_properties({"k": "v"})
    assert ours.table_metadata.properties["k"] == "v"  # a staged change is seen
    assert ours.table_metadata is ours.table_metadata  # computed once per change
    assert ours.table_metadata.model_dump(exclude={"last_updated_ms"}) == (
        theirs.table_metadata.model_dump(exclude={"last_updated_ms"})
    )
    # the private attribute the one-copy transaction reads (pyiceberg pinned)
    assert isinstance(Transaction(table)._updates, tuple)


def test_manifests_are_merged_unless_the_table_says_not_to(tmp_path: Path) -> None:
    made, checkpoint = _iceberg(tmp_path)
    target = made.table()
    with target.load().transaction() as txn:
        txn.set_properties({"commit.manifest.min-count-to-merge": "3"})
    _committed(made, checkpoint, range(6))
    table = target.load()
    assert len(table.current_snapshot().manifests(table.io)) < 3
    assert table.scan().to_arrow().num_rows == 60
    with table.transaction() as txn:
        txn.set_properties({"commit.manifest-merge.enabled": "false"})
    table = target.load()
    before = len(target.load().current_snapshot().manifests(table.io))
    _committed(made, checkpoint, range(6, 9))
    table = target.load()
    assert len(table.current_snapshot().manifests(table.io)) == before + 3
    assert table.scan().to_arrow().num_rows == 90


def test_keep_snapshots_expires_the_old_ones_and_the_sink_stays_exactly_once(
    tmp_path: Path,
) -> None:
    made, checkpoint = _iceberg(tmp_path, keepSnapshots="3")
    target = made.table()
    log = _committed(made, checkpoint, range(5))
    assert len(target.load().snapshots()) == 5  # below 2 x 3: nothing expired yet
    _committed(made, checkpoint, range(5, 6))
    table = target.load()
    assert len(table.snapshots()) == 3
    assert table.scan().to_arrow().num_rows == 60  # the data stays
    record = log.read(5)
    assert record is not None
    made.commit(record.prepared, 5, lambda n: None)  # the roll-forward of a landed commit
    assert target.load().scan().to_arrow().num_rows == 60
    assert made.committed() == (5, snapshot_of(target.load(), made.query_id, 5))
    # other writers' snapshots after ours: the marker keeps the sink exactly-once
    for _ in range(6):
        _other_append(target.load())
    table = target.load()
    made.table()._expire_snapshots(table, 6)
    table = target.load()
    assert len(table.snapshots()) == 3
    assert newest_batch(table, made.query_id) is None  # our snapshots are gone
    assert target.commit_batch(record.prepared, 5, {}) is False
    assert target.load().scan().to_arrow().num_rows == 78


def test_the_kept_delta_table_sees_commits_made_since_it_was_loaded(tmp_path: Path) -> None:
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    checkpoint = new_checkpoint(tmp_path)
    made = participant(sink_options("delta", tmp_path, checkpoint))
    _committed(made, checkpoint, range(1))  # the table is kept from here on
    location = str(tmp_path / "table")
    other = DeltaTable(location)
    write_deltalake(
        other,
        conform_rows(rows(9, 9, n=3), pa.schema(other.schema().to_arrow()), "t"),
        mode="append",
    )
    _committed(made, checkpoint, range(1, 2))
    # another driver of the query commits batch 2 behind the kept table's back
    items = write_tasks(made, 2)
    fresh = DeltaTable(location)
    fresh.create_write_transaction(
        [],
        "append",
        fresh.schema(),
        [],
        commit_properties=CommitProperties(app_transactions=[Transaction(made.query_id, 2)]),
    )
    assert made.table().commit_batch(items, 2, {}) is False
    assert DeltaTable(location).to_pyarrow_table().num_rows == 23


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_long_history_commits_each_batch_once(fmt: str, tmp_path: Path) -> None:
    checkpoint = new_checkpoint(tmp_path)
    extra = {"keepSnapshots": "4"} if fmt == "iceberg" else {}
    made = participant(sink_options(fmt, tmp_path, checkpoint, **extra))
    _committed(made, checkpoint, range(25))
    target = made.table()
    if fmt == "delta":
        table = target._table()
        assert table.to_pyarrow_table().num_rows == 250
        assert table.transaction_version(made.query_id) == 24
    else:
        table = target.load()
        assert table.scan().to_arrow().num_rows == 250
        assert len(table.snapshots()) < 8
    assert made.committed()[0] == 24
