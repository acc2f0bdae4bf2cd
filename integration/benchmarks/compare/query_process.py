"""One streaming query in a process (and session) of its own, so that a benchmark can kill its
driver hard and start it again (workloads 3 and 4).

Child: ``python -m benchmarks.compare.query_process '<json config>'`` (from ``integration/``)
runs the contender's query from ``input_topic`` to ``output`` (``kafka:<topic>``) with
``availableNow`` until the input is consumed, in Spark ``local[N]`` (N = CPU count, as the
benchmark's own session); config keys ``connector`` (a name of
:mod:`benchmarks.compare.connectors`), ``bootstrap``, ``input_topic``, ``output``,
``checkpoint``, ``max_offsets``, ``sink_options``, ``jars`` (the peer's ``spark.jars``), and
``events`` (optional): a file the child appends ``<event> <epoch seconds>`` lines to, ``session``
once its Spark session is up and ``started`` once the query started; ``progress`` (optional): a
file the child writes the query's progress reports to (a JSON list) once the query ended;
``spark_home`` and ``spark_conf`` (optional): the ``SPARK_HOME`` and extra Spark settings of
the child (a :class:`benchmarks.compare.opt_ins.Setup`). The connector ``floor``
reads the floor source (:mod:`benchmarks.floor_source`, ``floor_records`` rows, no Kafka) and
writes the floor sink (:mod:`benchmarks.floor_sink`): what any Python source and sink cost.

Parent: :func:`start` runs a child in a new session; :func:`kill` SIGKILLs that session (the
driver, its JVM and every Python worker at once); :func:`logged_batches` lists the batches
Spark has planned or committed under a checkpoint (``offsets/<N>``, ``commits/<N>``).
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


def kafka_to_kafka(
    connector: Any,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    checkpoint: Path,
    max_offsets: int,
    sink_options: dict[str, str],
    jars: str,
) -> dict[str, Any]:
    """The config of a child whose ``connector`` (a
    :class:`~benchmarks.compare.connectors.Connector`) reads ``input_topic`` and writes
    ``output_topic``; ``jars`` (the peer's ``spark.jars``) are passed to the peer only."""
    return {
        "connector": connector.name,
        "bootstrap": bootstrap,
        "input_topic": input_topic,
        "output": f"kafka:{output_topic}",
        "checkpoint": str(checkpoint),
        "max_offsets": max_offsets,
        "sink_options": sink_options,
        "jars": jars if connector.format == "kafka" else "",
    }


def with_setup(config: dict[str, Any], setup: Any) -> dict[str, Any]:
    """``config`` run in ``setup`` (a :class:`benchmarks.compare.opt_ins.Setup`)."""
    return {**config, "spark_home": setup.spark_home, "spark_conf": dict(setup.spark_conf)}


def start(config: dict[str, Any], log: TextIO) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if config.get("spark_home"):
        env["SPARK_HOME"] = config["spark_home"]
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


def logged_batches(checkpoint: Path, log: str = "commits") -> list[int]:
    """Batch ids in one of Spark's logs under ``checkpoint``: ``commits`` (the batch is durable:
    it will not run again) or ``offsets`` (the batch is planned)."""
    directory = checkpoint / log
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def wait_for_batch(
    checkpoint: Path, after: int, proc: subprocess.Popen[bytes], limit_s: float, log: str
) -> float | None:
    """Seconds until Spark's ``log`` (``commits`` or ``offsets``) holds a batch above ``after``
    (``None``: the child ended or ``limit_s`` passed first). Polls every 50 ms."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if any(b > after for b in logged_batches(checkpoint, log)):
            return time.monotonic() - started
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def read_events(path: Path) -> dict[str, float]:
    """The newest epoch second of each event in an ``events`` file (none: an empty dict)."""
    if not path.exists():
        return {}
    return {event: float(at) for event, at in (ln.split() for ln in path.read_text().splitlines())}


def _mark(config: dict[str, Any], event: str) -> None:
    if config.get("events"):
        with open(config["events"], "a") as f:
            f.write(f"{event} {time.time()}\n")


def floor_to_floor(checkpoint: Path, max_offsets: int, records: int) -> dict[str, Any]:
    """The config of a child that reads ``records`` rows of the floor source and writes them to
    the floor sink (module docstring)."""
    return {
        "connector": "floor",
        "bootstrap": "",
        "input_topic": "",
        "output": "floor",
        "checkpoint": str(checkpoint),
        "max_offsets": max_offsets,
        "floor_records": records,
        "jars": "",
    }


def _floor_query(spark: Any, config: dict[str, Any]) -> Any:
    from benchmarks import floor_sink, floor_source

    floor_source.register(spark)
    floor_sink.register(spark)
    df = (
        spark.readStream.format(floor_source.FORMAT)
        .option("records", str(config["floor_records"]))
        .option("maxOffsetsPerTrigger", str(config["max_offsets"]))
        .load()
    )
    writer = df.select("value", "partition").writeStream.format(floor_sink.FORMAT)
    return writer.option("checkpointLocation", config["checkpoint"]).trigger(availableNow=True)


def _kafka_query(spark: Any, config: dict[str, Any]) -> Any:
    from benchmarks.compare import connectors

    connector = connectors.by_name(config["connector"])
    df = connectors.read_stream(
        spark, connector, config["bootstrap"], config["input_topic"], config["max_offsets"]
    )
    return connectors.write_stream(
        df,
        connector,
        config["output"],
        config["checkpoint"],
        config["bootstrap"],
        config.get("sink_options") or {},
    )


def _main(config: dict[str, Any]) -> None:
    from benchmarks.compare import connectors

    spark = connectors.spark_session(
        f"bench-{config['connector']}", config.get("jars") or "", config.get("spark_conf")
    )
    _mark(config, "session")
    build = _floor_query if config["connector"] == "floor" else _kafka_query
    query = build(spark, config).start()
    _mark(config, "started")
    query.awaitTermination()
    if config.get("progress"):
        reports = [json.loads(p.json) for p in query.recentProgress]
        Path(config["progress"]).write_text(json.dumps(reports))
    spark.stop()


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
