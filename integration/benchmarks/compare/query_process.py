"""One streaming query in a process (and session) of its own, so that a benchmark can kill its
driver hard and start it again (workloads 3 and 4).

Child: ``python -m benchmarks.compare.query_process '<json config>'`` (from ``integration/``)
runs the contender's query from ``input_topic`` to ``output`` (``kafka:<topic>``) with
``availableNow`` until the input is consumed, in Spark ``local[2]``; config keys ``connector``
(a name of :mod:`benchmarks.compare.connectors`), ``bootstrap``, ``input_topic``, ``output``,
``checkpoint``, ``max_offsets``, ``sink_options``, ``jars`` (the peer's ``spark.jars``).

Parent: :func:`start` runs a child in a new session; :func:`kill` SIGKILLs that session (the
driver, its JVM and every Python worker at once); :func:`committed_batches` lists the batches
Spark has committed under a checkpoint (``commits/<N>``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

INTEGRATION_DIR = Path(__file__).resolve().parents[2]


def start(config: dict[str, Any], log: TextIO) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.compare.query_process", json.dumps(config)],
        cwd=INTEGRATION_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole session and wait for the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def committed_batches(checkpoint: Path) -> list[int]:
    """Batch ids with a Spark commit file (the batch is durable: it will not run again)."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def wait_for_commit(
    checkpoint: Path, after: int, proc: subprocess.Popen[bytes], limit_s: float
) -> float | None:
    """Seconds until a batch above ``after`` is committed (``None``: the child ended or
    ``limit_s`` passed first)."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if any(b > after for b in committed_batches(checkpoint)):
            return time.monotonic() - started
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def _main(config: dict[str, Any]) -> None:
    from benchmarks import local_spark
    from benchmarks.compare import connectors

    conf = {"spark.driver.memory": "2g"}
    if config.get("jars"):
        conf["spark.jars"] = config["jars"]
    spark = local_spark(f"bench-{config['connector']}", 2, **conf)
    connector = connectors.by_name(config["connector"])
    df = connectors.read_stream(
        spark, connector, config["bootstrap"], config["input_topic"], config["max_offsets"]
    )
    writer = connectors.write_stream(
        df,
        connector,
        config["output"],
        config["checkpoint"],
        config["bootstrap"],
        config.get("sink_options") or {},
    )
    writer.start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
