"""The Iceberg sink through a real REST catalog: Apache Iceberg's own REST catalog server
(:mod:`unaligned.testing.iceberg_rest_server`), started once for this module.

One query, three runs (``query_runner.py``, 3 batches), the catalog's own client (pyiceberg's
``RestCatalog``) on both sides:

1. killed right after batch 1's snapshot was committed through the catalog, before the sink
   knew it landed;
2. restarted; the catalog is stopped while batch 2's tasks write: the driver's table commit
   asks again until ``tableTimeout`` and the query fails naming the catalog, the option and the
   way out; ``unaligned inspect`` then shows batch 2 in doubt, unknown whether its commit
   landed (the table cannot be read);
3. the catalog is started again (same port, same SQLite catalog): inspect says batch 2 is not
   in the table; the query restarted commits it once.

Every record is in the table once, read back through the catalog; the data folder holds no
file the table does not name; ``unaligned inspect`` shows the table, the last batch and its
snapshot id.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crash_runs import PARTITIONS, Run, crash, expected, finish, input_topic, run_query, tail
from unaligned import cli
from unaligned.checkpoint import Checkpoint
from unaligned.testing import EmbeddedKafka
from unaligned.testing.iceberg_rest_server import IcebergRestServer

pytestmark = pytest.mark.slow

TopicFactory = Callable[..., str]


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergRestServer]:
    with IcebergRestServer(tmp_path_factory.mktemp("rest-catalog")) as server:
        yield server


def _run_stopping_the_catalog(
    config: dict[str, Any], tmp_path: Path, catalog: IcebergRestServer, markers: Path
) -> Run:
    """Run the query; stop the catalog as soon as a task of batch 2 has rows."""
    result: list[Run] = []
    runner = threading.Thread(target=lambda: result.append(run_query(config, tmp_path, None)))
    runner.start()
    deadline = time.monotonic() + 240
    while not any(markers.glob("b2-*")) and runner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    catalog.stop()
    runner.join()
    return result[0]


def _inspect(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["inspect", str(checkpoint), "--json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_iceberg_through_a_rest_catalog_exactly_once_through_a_crash_and_a_catalog_outage(
    rest_catalog: IcebergRestServer,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pyiceberg.catalog import load_catalog

    identifier = f"db{tmp_path.name[-8:].replace('-', '_')}.events"
    options = {
        **rest_catalog.options(),
        "tableFormat": "iceberg",
        "path": identifier,
        "partitionBy": "partition",
        "tableTimeout": "3s",
    }
    checkpoint = tmp_path / "checkpoint"
    config: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": input_topic(kafka, new_topic),
        "checkpoint": str(checkpoint),
        "max_offsets": 300,
        "extra_sink_options": options,
    }
    crash(config, tmp_path, "driver_after_table_commit@1")

    markers = tmp_path / "task-markers"
    markers.mkdir()
    slow = {
        **config,
        "task_marker_dir": str(markers),
        "slow_partition": 0,
        "slow_ms_per_row": 40,
        "slow_batches": [2],
    }
    failed = _run_stopping_the_catalog(slow, tmp_path, rest_catalog, markers)
    assert failed.returncode not in (0, -9), tail(failed)
    assert "tableTimeout=3000 ms" in failed.stderr, tail(failed)
    where = f"the rest catalog at {rest_catalog.uri} of Iceberg table {identifier}"
    assert where in failed.stderr, tail(failed)
    assert "restart the query once it answers again" in failed.stderr, tail(failed)

    # inspect: batch 2 decided, not done; whether its commit landed needs the table
    down = _inspect(checkpoint, capsys)
    assert down["tableTarget"]["table"] == identifier
    assert down["tableTarget"]["readError"] is not None
    assert [(b["batchId"], b["inTable"]) for b in down["inDoubt"]] == [(2, None)]
    assert down["inDoubt"][0]["outcome"].startswith("unknown: ")
    rest_catalog.start()
    up = _inspect(checkpoint, capsys)
    assert up["tableTarget"]["lastBatchId"] == 1, up["tableTarget"]
    assert [(b["batchId"], b["inTable"]) for b in up["inDoubt"]] == [(2, False)]
    assert "a restart commits it once" in up["inDoubt"][0]["outcome"]

    finish(config, tmp_path)

    table = load_catalog("rest", type="rest", uri=rest_catalog.uri).load_table(identifier)
    by_partition: dict[int, list[bytes]] = {}
    for row in table.scan().to_arrow().select(["partition", "value"]).to_pylist():
        by_partition.setdefault(row["partition"], []).append(row["value"])
    for p in range(PARTITIONS):
        assert sorted(by_partition.get(p, [])) == expected(p), f"partition {p}"
    query_id = Checkpoint.resolve(str(checkpoint)).query_id()
    epochs = sorted(
        int(s.summary["spark.sql.streaming.epochId"])
        for s in table.snapshots()
        if s.summary is not None and s.summary["spark.sql.streaming.queryId"] == query_id
    )
    assert epochs == [0, 1, 2]
    data = Path(table.location().removeprefix("file:").removeprefix("//")) / "data"
    on_disk = {str(p) for p in data.rglob("*.parquet")}
    named = {
        str(f).removeprefix("file:").removeprefix("//")
        for f in table.inspect.files().column("file_path").to_pylist()
    }
    assert on_disk and on_disk == named, f"files outside the table: {sorted(on_disk - named)}"

    done = _inspect(checkpoint, capsys)
    last = max(
        (s for s in table.snapshots() if s.summary is not None),
        key=lambda s: int(s.summary["spark.sql.streaming.epochId"]),  # type: ignore[index]
    )
    assert done["inDoubt"] == []
    assert done["tableTarget"] | {"readError": None} == {
        "format": "iceberg",
        "table": identifier,
        "catalogName": "default",
        "reachedThrough": f"the rest catalog at {rest_catalog.uri}",
        "dataLocation": done["tableTarget"]["dataLocation"],
        "lastBatchId": 2,
        "snapshot": str(last.snapshot_id),
        "readError": None,
    }
    assert cli.main(["inspect", str(checkpoint)]) == 0
    text = capsys.readouterr().out
    assert f"{identifier} (iceberg)" in text
    assert f"batch 2 (snapshot {last.snapshot_id})" in text
