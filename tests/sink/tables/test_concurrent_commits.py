"""Another writer commits between the sink's check and its commit: a concurrent append makes
the commit go again (never fail, never duplicate); the same batch committed meanwhile by
another driver of the query (a commit runner of an earlier run) is not committed twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from table_sink_steps import new_checkpoint, participant, rows, sink_options, write_tasks
from unaligned.sink.tables.schema_fit import conform_rows
from unaligned.sink.tables.table_participant import TableParticipant


def _after_first(original: Callable[..., Any], meanwhile: Callable[[], None]) -> Callable[..., Any]:
    calls = {"n": 0}

    def load(*args: Any, **kwargs: Any) -> Any:
        loaded = original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            meanwhile()
        return loaded

    load.calls = calls  # type: ignore[attr-defined]
    return load


def _other_rows(made: TableParticipant, schema: pa.Schema) -> pa.Table:
    return conform_rows(rows(9, 9, n=3), schema, "t")


def _our_batches(made: TableParticipant, fmt: str) -> list[str]:
    target = made.table()
    if fmt == "delta":
        return [
            h["unaligned.batchId"]
            for h in target._table().history()
            if h.get("unaligned.queryId") == made.query_id
        ]
    return [
        s.summary["spark.sql.streaming.epochId"]
        for s in target.load().snapshots()
        if s.summary is not None and s.summary["spark.sql.streaming.queryId"] == made.query_id
    ]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_concurrent_append_makes_the_commit_go_again(fmt: str, tmp_path: Path) -> None:
    made = participant(sink_options(fmt, tmp_path, new_checkpoint(tmp_path)))
    items = write_tasks(made, 0)
    target = made.table()
    if fmt == "delta":
        from deltalake import write_deltalake

        def append() -> None:
            table = target._table()
            write_deltalake(
                table, _other_rows(made, pa.schema(table.schema().to_arrow())), mode="append"
            )

        target._table = _after_first(target._table, append)
    else:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        def append() -> None:
            table = target.load()
            table.append(_other_rows(made, schema_to_pyarrow(table.schema())))

        target.load = _after_first(target.load, append)
    assert target.commit_batch(items, 0, {}) is True
    assert _our_batches(made, fmt) == ["0"]
    if fmt == "delta":
        assert target._table().to_pyarrow_table().num_rows == 13
    else:
        assert target.load().scan().to_arrow().num_rows == 13
        assert target.load.calls["n"] >= 2, "the commit did not meet the concurrent append"


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_the_same_batch_committed_meanwhile_is_not_committed_again(
    fmt: str, tmp_path: Path
) -> None:
    made = participant(sink_options(fmt, tmp_path, new_checkpoint(tmp_path)))
    items = write_tasks(made, 0)
    ours, theirs = made.table(), made.table()

    def commit_elsewhere() -> None:
        assert theirs.commit_batch(items, 0, {}) is True

    if fmt == "delta":
        ours._table = _after_first(ours._table, commit_elsewhere)
    else:
        ours.load = _after_first(ours.load, commit_elsewhere)
    assert ours.commit_batch(items, 0, {}) is False
    assert _our_batches(made, fmt) == ["0"]
    assert made.committed()[0] == 0
