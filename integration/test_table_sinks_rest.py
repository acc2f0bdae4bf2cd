"""The Iceberg sink through a real REST catalog: Apache Iceberg's own REST catalog test
fixture (:mod:`unaligned.testing.iceberg_rest_server`), started once for this module.

The query (``query_runner.py``, 3 batches) is killed right after batch 1's snapshot was
committed through the catalog, before the sink knew it landed, and restarted: the restart finds
the batch in the table (the marker property, read through the catalog) and commits it no
second time; every record is in the table once, read back by pyiceberg through the catalog,
and the data folder holds no file the table does not name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crash_runs import PARTITIONS, crash, expected, finish, input_topic
from unaligned.checkpoint import Checkpoint
from unaligned.testing import EmbeddedKafka
from unaligned.testing.iceberg_rest_server import IcebergRestServer

pytestmark = pytest.mark.slow

TopicFactory = Callable[..., str]


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergRestServer]:
    with IcebergRestServer(tmp_path_factory.mktemp("rest-catalog")) as server:
        yield server


def test_iceberg_through_a_rest_catalog_exactly_once_through_a_lost_commit_answer(
    rest_catalog: IcebergRestServer,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
) -> None:
    from pyiceberg.catalog import load_catalog

    identifier = f"db{tmp_path.name[-8:].replace('-', '_')}.events"
    options = {
        "tableFormat": "iceberg",
        "path": identifier,
        "catalog.type": "rest",
        "catalog.uri": rest_catalog.uri,
        "partitionBy": "partition",
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
    data = Path(table.location().removeprefix("file://")) / "data"
    on_disk = {str(p) for p in data.rglob("*.parquet")}
    named = {
        str(f).removeprefix("file://")
        for f in table.inspect.files().column("file_path").to_pylist()
    }
    assert on_disk == named, f"files outside the table: {sorted(on_disk - named)}"
