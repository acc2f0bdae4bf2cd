"""``format("unaligned")`` to ``format("unaligned")`` from a Spark Connect client (issue 11).

The module starts a Spark Connect server (``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` from the pip-installed pyspark's
Spark home, which ships ``jars/spark-connect_2.13-4.3.0.jar``) in local mode, bound to
127.0.0.1 on a free port, with ``PYSPARK_PYTHON`` set to this interpreter and ``PYTHONPATH``
to the directory this process imports ``unaligned`` from: the server's Python workers find
``pyspark_unaligned`` and register the data source on the first lookup of ``"unaligned"``;
no jar and no ``spark.dataSource.register`` call. Everything the test does with Spark goes
through the Connect client (``SparkSession.builder.remote``); the broker is the session's
``kafka`` fixture, and producing input and reading the output back are test setup and checks.

Two pitfalls of a Connect client in the same process as the classic ``spark`` fixture:
``SparkSession.builder.remote(url).getOrCreate()`` refuses with ``SESSION_ALREADY_EXIST`` while
a classic SparkContext runs (``create()`` does not check); and building a remote session sets
``SPARK_CONNECT_MODE_ENABLED=1`` in ``os.environ``, which a remote ``stop()`` leaves set, so
``pyspark.sql.functions`` and the classic builder would switch to Connect in every later test
of this process. The ``connect`` fixture uses ``create()`` and restores the variable.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unaligned
from cluster import alive, descendants, pyspark_home
from harness import kafka_stream, produce_skewed, wait_until
from unaligned.checkpoint import Checkpoint
from unaligned.finishing import finished_batch
from unaligned.kafka.transactions.transaction_states import list_transactional_ids
from unaligned.testing import EmbeddedKafka

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PARTITIONS = 3
# set by SparkSession.builder.remote(...) and left set by stop(): see the module docstring
MODE_VARIABLE = "SPARK_CONNECT_MODE_ENABLED"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _stop_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the server JVM and every process below it (pyspark's daemon and Python workers
    leave the JVM's process group, so a group kill would miss them)."""
    pids = [proc.pid, *descendants(proc.pid)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)
    wait_until(lambda: not any(alive(pid) for pid in pids), "the Connect server's processes gone")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server in local mode on a loopback port; yields its ``sc://`` URL."""
    root = tmp_path_factory.mktemp("connect-server")
    port = _free_port()
    pysrc = str(Path(unaligned.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(pyspark_home()),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (pysrc, env.get("PYTHONPATH")) if p),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
    )
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    confs = {
        "spark.master": "local[2]",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.warehouse.dir": str(root / "warehouse"),
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
    }
    args = [str(pyspark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    for key, value in confs.items():
        args += ["--conf", f"{key}={value}"]
    log = root / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while not _accepts_connections(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the Connect server did not start:\n{log.read_text(errors='replace')[-4000:]}"
                )
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop_tree(proc)


@pytest.fixture(scope="module")
def connect(connect_server: str) -> Iterator[Any]:
    """A Spark Connect client session; ``SPARK_CONNECT_MODE_ENABLED`` restored afterwards."""
    from pyspark.sql import SparkSession

    before = os.environ.get(MODE_VARIABLE)
    # create(), not getOrCreate(): see the module docstring
    session = SparkSession.builder.remote(connect_server).create()
    try:
        assert type(session).__module__ == "pyspark.sql.connect.session"
        yield session
    finally:
        session.stop()
        if before is None:
            os.environ.pop(MODE_VARIABLE, None)
        else:
            os.environ[MODE_VARIABLE] = before


def _written(kafka: EmbeddedKafka, topic: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(topic, read_committed=True):
        got[record.partition].append(record.value)
    return dict(got)


def _to_kafka(df: Any, kafka: EmbeddedKafka, output: str, checkpoint: Path, prefix: str) -> Any:
    return (
        df.select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("transactionalIdPrefix", prefix)
        .option("checkpointLocation", str(checkpoint))
    )


def test_kafka_to_kafka_exactly_once_from_a_connect_client(
    connect: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    source, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    expected = produce_skewed(kafka, source, [600, 150, 150], value_bytes=100)
    checkpoint, prefix = tmp_path / "checkpoint", f"connect-{tmp_path.name}"

    df = kafka_stream(connect, kafka, source, maxOffsetsPerTrigger="500")
    assert type(df).__module__ == "pyspark.sql.connect.dataframe"
    query = _to_kafka(df, kafka, output, checkpoint, prefix).trigger(availableNow=True).start()
    assert query.awaitTermination(300), "the query did not end"  # a hang fails, not blocks
    assert query.exception() is None

    assert _written(kafka, output) == expected, "not every record exactly once, in order"
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    assert list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix) == []
    batches = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert batches == [0, 1]  # 500 + 400 records: maxOffsetsPerTrigger held


def test_await_finished_ends_a_bounded_query_from_a_connect_client(
    connect: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    source, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    expected = produce_skewed(kafka, source, [300, 100, 100], value_bytes=100)
    checkpoint, prefix = tmp_path / "checkpoint", f"connect-fin-{tmp_path.name}"

    df = kafka_stream(connect, kafka, source, endingOffsets="latest", maxOffsetsPerTrigger="300")
    query = (
        _to_kafka(df, kafka, output, checkpoint, prefix).trigger(processingTime="1 second").start()
    )
    try:
        assert unaligned.await_finished(query, str(checkpoint), timeout_s=240)
    finally:
        if query.isActive:
            query.stop()
    assert not query.isActive

    assert finished_batch(Checkpoint.resolve(str(checkpoint))) is not None
    assert _written(kafka, output) == expected, "not every record exactly once, in order"
    assert list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix) == []
