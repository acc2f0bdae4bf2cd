"""The Iceberg and Delta sinks on an S3-compatible store: a local ``moto`` server in server
mode (its own process: deltalake holds the GIL while it waits on a request, so a server thread
in this process would never answer it).

The query (``query_runner.py``, 3 batches) is killed right after batch 1's table commit, before
the sink knew it landed, and restarted: every record is in the table once, read back by
deltalake / pyiceberg from the store, and the bucket holds no data file the table does not name.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from crash_runs import PARTITIONS, crash, expected, finish, input_topic
from unaligned.checkpoint import Checkpoint
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

KEYS = {"key": "test", "secret": "test", "region": "us-east-1"}
BUCKET = "lake"
TopicFactory = Callable[..., str]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """``python -m moto.server`` on a free loopback port, with a bucket."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the moto server did not start") from None
                time.sleep(0.2)
        _fs(endpoint).create_dir(BUCKET)
        yield endpoint
    finally:
        server.kill()
        server.wait()


def _fs(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=KEYS["key"],
        secret_key=KEYS["secret"],
        region=KEYS["region"],
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        allow_bucket_creation=True,
    )


def _sink_options(fmt: str, endpoint: str, tmp_path: Path) -> dict[str, str]:
    if fmt == "delta":
        return {
            "tableFormat": "delta",
            "path": f"s3://{BUCKET}/{tmp_path.name}/delta",
            "storage.AWS_ENDPOINT_URL": endpoint,
            "storage.AWS_ACCESS_KEY_ID": KEYS["key"],
            "storage.AWS_SECRET_ACCESS_KEY": KEYS["secret"],
            "storage.AWS_REGION": KEYS["region"],
            "storage.AWS_ALLOW_HTTP": "true",
        }
    return {
        "tableFormat": "iceberg",
        "path": "db.events",
        "catalog.type": "sql",
        "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "catalog.warehouse": f"s3://{BUCKET}/{tmp_path.name}/warehouse",
        "catalog.s3.endpoint": endpoint,
        "catalog.s3.access-key-id": KEYS["key"],
        "catalog.s3.secret-access-key": KEYS["secret"],
        "catalog.s3.region": KEYS["region"],
    }


def _read(fmt: str, options: dict[str, str]) -> tuple[pa.Table, set[str], str]:
    """The table's rows, the data files it names (bucket paths) and its data folder."""
    if fmt == "delta":
        from deltalake import DeltaTable

        storage = {k.removeprefix("storage."): v for k, v in options.items() if "." in k}
        table = DeltaTable(options["path"], storage_options=storage)
        files = {uri.removeprefix("s3://") for uri in table.file_uris()}
        return table.to_pyarrow_table(), files, options["path"].removeprefix("s3://")
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "default", **{k.removeprefix("catalog."): v for k, v in options.items() if "." in k}
    )
    table = catalog.load_table(options["path"])
    files = {
        str(f).removeprefix("s3://") for f in table.inspect.files().column("file_path").to_pylist()
    }
    return table.scan().to_arrow(), files, f"{table.location().removeprefix('s3://')}/data"


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_table_on_s3_exactly_once_through_a_lost_commit_answer(
    fmt: str,
    s3_endpoint: str,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
) -> None:
    options = _sink_options(fmt, s3_endpoint, tmp_path)
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
    rows, named, folder = _read(fmt, options)
    by_partition: dict[int, list[bytes]] = {}
    for row in rows.select(["partition", "value"]).to_pylist():
        by_partition.setdefault(row["partition"], []).append(row["value"])
    for p in range(PARTITIONS):
        assert sorted(by_partition.get(p, [])) == expected(p), f"partition {p}"
    listed = {
        info.path
        for info in _fs(s3_endpoint).get_file_info(pafs.FileSelector(folder, recursive=True))
        if info.path.endswith(".parquet") and "/_delta_log/" not in info.path
    }
    assert listed == named, f"files outside the table: {sorted(listed - named)}"
    assert Checkpoint.resolve(str(checkpoint)).query_id()
