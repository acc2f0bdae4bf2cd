"""A catalog or store out of reach: the table commit asks again until ``tableTimeout``, then
fails naming the catalog, the option and the way out; the checkpoint's record of the table lets
a batch be checked without the catalog; ``unaligned inspect`` reads the table to say which
in-doubt batch landed. Real tables (deltalake, pyiceberg's SQLite catalog), and a REST catalog
URI where nothing listens."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from table_sink_steps import SCHEMA, new_checkpoint, participant, sink_options, write_tasks
from unaligned.checkpoint import Checkpoint
from unaligned.errors import TableCommitError, TableUnavailableError
from unaligned.inspection import build_view
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import SinkOptions
from unaligned.sink.table_target import TableTarget
from unaligned.sink.tables.iceberg_table import IcebergTarget
from unaligned.sink.tables.table_outage import commit_through_outages
from unaligned.sink.tables.table_participant import TableParticipant
from unaligned.sink.tables.table_record import read_record
from unaligned.testing.broker_config import free_loopback_port

FORMATS = ["delta", "iceberg"]


def _rest_target(tmp_path: Path, timeout: str) -> TableTarget:
    uri = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens there
    options = {
        "checkpointLocation": str(tmp_path / "checkpoint"),
        "tableFormat": "iceberg",
        "path": "db.events",
        "catalog.type": "rest",
        "catalog.uri": uri,
        "tableTimeout": timeout,
    }
    target = SinkOptions.parse(options).target
    assert isinstance(target, TableTarget)
    return target


def test_a_catalog_out_of_reach_is_asked_again_until_table_timeout(tmp_path: Path) -> None:
    import pyiceberg.catalog.rest  # noqa: F401 - imported before the clock starts

    target = _rest_target(tmp_path, "600ms")
    uri = target.options["uri"]
    with pytest.raises(TableUnavailableError) as failed:
        commit_through_outages(target, 7, IcebergTarget(target, "q").load)
    message = str(failed.value)
    assert message.startswith(f"batch 7: the rest catalog at {uri} of Iceberg table db.events")
    assert "within tableTimeout=600 ms" in message
    assert int(message.split(" ms, ")[1].split(" attempt")[0]) > 1
    assert "restart the query once it answers again" in message


def test_a_refusal_is_not_asked_again(tmp_path: Path) -> None:
    target = _rest_target(tmp_path, "60s")
    calls = []

    def refused() -> None:
        calls.append(1)
        raise TableCommitError("no")

    with pytest.raises(TableCommitError):
        commit_through_outages(target, 1, refused)
    assert calls == [1]


def test_the_record_keeps_no_secret(tmp_path: Path) -> None:
    checkpoint = new_checkpoint(tmp_path)
    options = sink_options(
        "iceberg",
        tmp_path,
        checkpoint,
        **{
            "catalog.s3.secret-access-key": "s3cret",
            "catalog.token": "t0ken",
            "catalog.credential": "id:cr3d",
            "catalog.s3.endpoint": "http://user:pw@127.0.0.1:9000",
        },
    )
    participant(options)
    text = (checkpoint / "unaligned" / "table-target.json").read_text()
    for secret in ("s3cret", "t0ken", "cr3d", "pw@"):
        assert secret not in text
    assert json.loads(text)["properties"]["s3.endpoint"] == "http://127.0.0.1:9000"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_batch_is_checked_without_the_catalog_and_inspect_says_which_batch_landed(
    fmt: str, tmp_path: Path
) -> None:
    checkpoint = new_checkpoint(tmp_path)
    options = sink_options(fmt, tmp_path, checkpoint)
    made = participant(options)
    cp = Checkpoint.resolve(str(checkpoint))
    log = CommitLog(cp)
    items = {b: write_tasks(made, b) for b in range(3)}
    for b in range(3):  # all decided; 0 and 1 committed to the table, only 0 marked done
        made.check_decidable(items[b], b)
        assert log.write(CommitRecord(b, made.kind, tuple(items[b]), 0))
    for b in range(2):
        made.commit(items[b], b, lambda n: None)
    log.mark_done(0)

    if fmt == "iceberg":  # the commit process, fresh, with the catalog gone
        catalog = tmp_path / "warehouse" / "unaligned-catalog.db"
        os.rename(catalog, tmp_path / "away.db")
        parsed = SinkOptions.parse(options)
        fresh = TableParticipant.for_query(parsed.target, SCHEMA, cp)  # type: ignore[arg-type]
        fresh.check_decidable(items[2], 2)  # the data folder from the record: no catalog
        os.rename(tmp_path / "away.db", catalog)

    record = read_record(cp)
    assert record is not None and record.target.format.value == fmt
    checkpoint_view = build_view(cp)
    view, outcomes = checkpoint_view.table_target, checkpoint_view.in_doubt
    assert view is not None and view.read_error is None
    assert (view.format, view.last_batch_id) == (fmt, 1)
    assert view.snapshot == made.committed()[1]
    assert [(b.batch_id, b.in_table) for b in outcomes] == [(1, True), (2, False)]
    assert "a restart only marks it done" in str(outcomes[0].outcome)
    assert "a restart commits it once" in str(outcomes[1].outcome)


def test_what_asking_again_cannot_cure_is_no_outage() -> None:
    from unaligned.sink.tables.table_outage import is_outage

    assert is_outage(ConnectionRefusedError()) and is_outage(TimeoutError())
    assert not is_outage(FileNotFoundError()) and not is_outage(PermissionError())
    assert not is_outage(TableCommitError("refused"))
