"""Channel state that outlives a change of the query (issue 8), end to end: a real broker, Spark,
a throttled Kafka sink that leaves channel state pending, then a restart of the same checkpoint
with the sink's input columns in another order. Every record is read back with read_committed.

Each run is a subprocess: this file is also its runner (``python test_channel_state_faults.py
'<json config>'``), so that the sink's input columns can differ between runs and a crash point
can kill a run hard (``UNALIGNED_CRASH_AT``, as ``query_runner.py`` does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

PARTITIONS = 2
RECORDS = 600  # per partition, before the first run
MORE_RECORDS = 50  # per partition, produced between the two runs
VALUE_BYTES = 1000
THROTTLE_BYTES_PER_S = 200_000  # per producer: a task writes about a third of its input in 1 s


# --- the runner (a subprocess) --------------------------------------------------------------------


def run_query(config: dict[str, Any]) -> None:
    """Kafka -> ``select(*columns)`` -> format("unaligned") Kafka sink. ``trigger``
    ``availableNow`` (default) runs to the end of the input; ``stop_when_pending`` runs every
    second and calls ``query.stop()`` once a finished batch left channel state pending."""
    os.environ["UNALIGNED_CRASH_SESSION"] = str(os.getsid(0))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2,3]")
        .appName("unaligned-channel-state-faults")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    source = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("subscribe", config["input_topic"])
        .option("startingOffsets", "earliest")
        .load()
        .select(*config["columns"])
    )
    writer = (
        source.writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("topic", config["output_topic"])
        .option("checkpointLocation", config["checkpoint"])
    )
    for key, value in config["sink_options"].items():
        writer = writer.option(key, value)
    if config.get("trigger", "availableNow") == "availableNow":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime="1 second").start()
        log = CommitLog(Checkpoint.resolve(config["checkpoint"]))
        deadline = time.monotonic() + 240
        while not _pending_after_a_finished_batch(log):
            if query.exception() is not None:
                raise query.exception()
            if time.monotonic() > deadline:
                raise TimeoutError("no finished batch left channel state pending")
            time.sleep(0.2)
        query.stop()
    spark.stop()


def _pending_after_a_finished_batch(log: CommitLog) -> bool:
    decided = log.decided_batch_ids()
    if not decided or not log.is_done(decided[-1]):
        return False
    record = log.read(decided[-1])
    return record is not None and bool(record.channel_state)


# --- the tests ------------------------------------------------------------------------------------


def _values(partition: int, start: int, count: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs: the key names its value, so a swap shows."""
    return [
        (
            f"k-{partition}-{i:05d}".encode(),
            f"v-{partition}-{i:05d}-".encode().ljust(VALUE_BYTES, b"x"),
        )
        for i in range(start, start + count)
    ]


def _produce(kafka: EmbeddedKafka, topic: str, start: int, count: int) -> None:
    kafka.produce(
        topic,
        [
            (partition, key, value, None, None)
            for partition in range(PARTITIONS)
            for key, value in _values(partition, start, count)
        ],
    )


def _run(config: dict[str, Any], tmp_path: Path, crash_at: str | None = None) -> int:
    env = dict(os.environ)
    env.pop("UNALIGNED_CRASH_AT", None)
    if crash_at:
        env["UNALIGNED_CRASH_AT"] = crash_at
    log = tmp_path / f"run-{time.monotonic_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, __file__, json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            timeout=420,
        )
    if crash_at is None and proc.returncode != 0:
        pytest.fail(f"query failed ({proc.returncode}):\n{log.read_text()[-6000:]}")
    return proc.returncode


def _read_back(kafka: EmbeddedKafka, output: str) -> dict[int, list[tuple[bytes, bytes]]]:
    got: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for consumed in kafka.consume_all(output, read_committed=True):
        got[consumed.partition].append((consumed.key, consumed.value))
    return got


@pytest.mark.slow
def test_state_pending_at_a_stop_is_replayed_by_name_after_the_columns_were_reordered(
    kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    """Issue 8.3: stopped (killed right after batch 0's commit) with channel state pending,
    restarted with ``select("value", "key", "partition")`` instead of ``("key", "value",
    "partition")``: every record exactly once, in order, key and value intact."""
    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    _produce(kafka, topic, 0, RECORDS)
    checkpoint = tmp_path / "checkpoint"
    prefix = f"ua-{tmp_path.name}"
    config: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "columns": ["key", "value", "partition"],
        "sink_options": {
            "alignedCheckpointTimeout": "1s",
            "chunkRows": "100",
            "maxUnacknowledgedBytes": "65536",
            "transactionalIdPrefix": prefix,
        },
    }
    kafka.throttle_producers(THROTTLE_BYTES_PER_S)
    try:
        returncode = _run(config, tmp_path, crash_at="driver_after_sink_commit@0")
    finally:
        kafka.throttle_producers(None)
    assert returncode == -9
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    record = log.read(0)
    assert record is not None and log.is_done(0)
    pending = {
        index: sum(r.remaining_rows for r in refs) for index, refs in record.channel_state.items()
    }
    assert sum(pending.values()) > 0, "batch 0 should have left channel state"

    # Every partition gets new records, so every sink task of the next batch has input too.
    _produce(kafka, topic, RECORDS, MORE_RECORDS)
    reordered = dict(config, columns=["value", "key", "partition"])
    reordered["sink_options"] = dict(config["sink_options"], alignedCheckpointTimeout="120s")
    _run(reordered, tmp_path)

    got = _read_back(kafka, output)
    for partition in range(PARTITIONS):
        expected = _values(partition, 0, RECORDS + MORE_RECORDS)
        assert len(got[partition]) == len(expected), f"partition {partition}: count differs"
        swapped = [pair for pair in got[partition] if pair[0].startswith(b"v-")]
        assert not swapped, (
            f"partition {partition}: {len(swapped)} records with key and value swapped"
        )
        assert got[partition] == expected, f"partition {partition}: order or content differs"
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    latest = log.read(log.decided_batch_ids()[-1])
    assert latest is not None and latest.channel_state == {}, "channel state left pending"
    state_dir = checkpoint / "unaligned" / "channel-state"
    leftovers = [p for p in state_dir.rglob("*") if p.is_file()] if state_dir.exists() else []
    assert leftovers == [], f"channel-state files left: {leftovers}"


@pytest.mark.slow
def test_state_pending_at_query_stop_is_replayed_by_idle_barriers_after_a_reorder(
    kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    """Issue 8.3 through ``query.stop()``, and with no new input after the restart: the pending
    rows are replayed by idle barriers, whose sink tasks have no input batch to take the
    current columns from (they need the input schema Spark declared for the sink)."""
    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    _produce(kafka, topic, 0, RECORDS)
    checkpoint = tmp_path / "checkpoint"
    config: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "columns": ["key", "value", "partition"],
        "trigger": "stop_when_pending",
        "sink_options": {
            "alignedCheckpointTimeout": "1s",
            "chunkRows": "100",
            "maxUnacknowledgedBytes": "65536",
            "transactionalIdPrefix": f"ua-{tmp_path.name}",
        },
    }
    kafka.throttle_producers(THROTTLE_BYTES_PER_S)
    try:
        _run(config, tmp_path)
    finally:
        kafka.throttle_producers(None)
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    decided = log.decided_batch_ids()
    record = log.read(decided[-1])
    assert record is not None and record.channel_state, "the stop should leave state pending"

    reordered = dict(config, columns=["value", "key", "partition"], trigger="availableNow")
    _run(reordered, tmp_path)

    got = _read_back(kafka, output)
    for partition in range(PARTITIONS):
        expected = _values(partition, 0, RECORDS)
        swapped = [pair for pair in got[partition] if pair[0].startswith(b"v-")]
        assert not swapped, (
            f"partition {partition}: {len(swapped)} records with key and value swapped"
        )
        assert got[partition] == expected, f"partition {partition}: count, order or content differs"
    latest = log.read(log.decided_batch_ids()[-1])
    assert latest is not None and latest.channel_state == {}, "channel state left pending"


if __name__ == "__main__":
    run_query(json.loads(sys.argv[1]))
