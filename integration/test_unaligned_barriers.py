"""Unaligned barriers end to end: a slow (throttled) Kafka sink with one hot partition.

Each query runs in a subprocess (``query_runner.py``) so that a crash point can kill it hard.
Output is checked by reading every record back with read_committed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import kafka_stream, produce_skewed
from unaligned.barriers.metrics import BarrierMetrics, read_metrics
from unaligned.checkpoint import Checkpoint
from unaligned.kafka.transactions.transaction_states import list_transactional_ids
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

RUNNER = Path(__file__).with_name("query_runner.py")
PARTITIONS = 4
HOT_RECORDS = 1200  # partition 0: two thirds of the data
COLD_RECORDS = 200
VALUE_BYTES = 1000
THROTTLE_BYTES_PER_S = 200_000  # per producer (client id): the hot task needs about 6 s


def _input(kafka: EmbeddedKafka, new_topic: Any) -> tuple[str, dict[int, list[bytes]]]:
    topic = new_topic(partitions=PARTITIONS)
    counts = [HOT_RECORDS] + [COLD_RECORDS] * (PARTITIONS - 1)
    return topic, produce_skewed(kafka, topic, counts, VALUE_BYTES)


def _run(config: dict[str, Any], tmp_path: Path, crash_at: str | None = None) -> int:
    env = dict(os.environ)
    env.pop("UNALIGNED_CRASH_AT", None)
    if crash_at:
        env["UNALIGNED_CRASH_AT"] = crash_at
    log = tmp_path / f"runner-{time.monotonic_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, str(RUNNER), json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            timeout=420,
        )
    if crash_at is None and proc.returncode != 0:
        pytest.fail(f"query failed ({proc.returncode}):\n{log.read_text()[-4000:]}")
    return proc.returncode


@pytest.fixture
def throttled(kafka: EmbeddedKafka) -> Iterator[None]:
    kafka.throttle_producers(THROTTLE_BYTES_PER_S)
    try:
        yield
    finally:
        kafka.throttle_producers(None)


def _config(
    kafka: EmbeddedKafka, topic: str, output: str, checkpoint: Path, **sink: str
) -> dict[str, Any]:
    return {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "max_offsets": 100_000,
        "extra_sink_options": {
            "chunkRows": "100",
            "maxUnacknowledgedBytes": "65536",
            "transactionalIdPrefix": f"ua-{checkpoint.parent.name}-{checkpoint.name}",
            **sink,
        },
    }


def _assert_exactly_once_in_order(
    kafka: EmbeddedKafka,
    output: str,
    expected: dict[int, list[bytes]],
    checkpoint: Path,
    prefix: str,
) -> None:
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        got[record.partition].append(record.value)
    for partition, values in expected.items():
        assert len(got[partition]) == len(values), f"partition {partition}: count differs"
        assert got[partition] == values, f"partition {partition}: order or content differs"
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    assert list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix) == []
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    latest = log.read(log.decided_batch_ids()[-1])
    assert latest is not None and latest.channel_state == {}, "channel state left pending"
    state_dir = checkpoint / "unaligned" / "channel-state"
    leftovers = [p for p in state_dir.rglob("*") if p.is_file()] if state_dir.exists() else []
    assert leftovers == [], f"channel-state files left: {leftovers}"


def _metrics(checkpoint: Path) -> list[BarrierMetrics]:
    return read_metrics(Checkpoint.resolve(str(checkpoint)))


@pytest.mark.slow
def test_unaligned_batches_commit_on_time_while_aligned_wait_for_the_slow_partition(
    kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path, throttled: None
) -> None:
    topic, expected = _input(kafka, new_topic)
    durations: dict[str, list[int]] = {}
    for mode in ("aligned", "unaligned"):
        output = new_topic(partitions=PARTITIONS)
        checkpoint = tmp_path / mode
        config = _config(
            kafka, topic, output, checkpoint, checkpointMode=mode, alignedCheckpointTimeout="1s"
        )
        _run(config, tmp_path)
        prefix = config["extra_sink_options"]["transactionalIdPrefix"]
        _assert_exactly_once_in_order(kafka, output, expected, checkpoint, prefix)
        metrics = _metrics(checkpoint)
        # Time from the batch's first task start to its commit: the start delay before it
        # (Python workers forked and importing, 15-18 s for a first batch on a loaded
        # machine) is the same work in both modes and varies by seconds between runs.
        durations[mode] = [
            m.duration_ms - (m.start_delay_ms or 0) for m in metrics if m.rows_written
        ]
        if mode == "aligned":
            assert metrics and all(m.mode == "aligned" and m.rows_spilled == 0 for m in metrics)
        else:
            cut = [m for m in metrics if m.mode == "unaligned"]
            assert cut and sum(m.rows_spilled for m in cut) > 0
            assert sum(m.rows_replayed for m in metrics) >= sum(m.rows_spilled for m in metrics)
            assert len(metrics) > 1, "the spilled rows were written by later (idle) barriers"
    # The same input through the same throttle: the aligned batch waits for the hot partition
    # (1.2 MB at 200 KB/s, 6 s at least), every unaligned batch is cut at its timeout instead.
    assert max(durations["unaligned"]) < max(durations["aligned"]), durations


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash_at",
    ["driver_after_sink_commit@0", "task_during_merge@1"],
    ids=["after_a_commit_left_state", "while_batch_1_merges_pending_state"],
)
def test_a_hard_kill_with_channel_state_pending_then_a_restart_is_exactly_once(
    kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path, crash_at: str
) -> None:
    """Killed right after batch 0 committed with channel state pending, or while batch 1,
    timed out again in its replay, merges the rest of that state into its new state (step
    3a): the restart replays what the record names (merged and unmerged refs mixed) and writes
    every record once, in order."""
    topic, expected = _input(kafka, new_topic)
    output = new_topic(partitions=PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    config = _config(kafka, topic, output, checkpoint, alignedCheckpointTimeout="1s")
    kafka.throttle_producers(THROTTLE_BYTES_PER_S)
    try:
        returncode = _run(config, tmp_path, crash_at=crash_at)
    finally:
        kafka.throttle_producers(None)
    assert returncode == -9, f"harness: no kill at {crash_at}"
    record = CommitLog(Checkpoint.resolve(str(checkpoint))).read(0)
    assert record is not None and record.channel_state, "batch 0 should have left channel state"
    _run(config, tmp_path)
    if crash_at.startswith("task_during_merge"):
        metrics = read_metrics(Checkpoint.resolve(str(checkpoint)))
        assert any(m.rows_merged for m in metrics), "the restart merged pending state too"
    prefix = config["extra_sink_options"]["transactionalIdPrefix"]
    _assert_exactly_once_in_order(kafka, output, expected, checkpoint, prefix)


@pytest.mark.slow
def test_task_failure_during_replay_is_retried_exactly_once(
    kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path, throttled: None
) -> None:
    topic, expected = _input(kafka, new_topic)
    output = new_topic(partitions=PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    config = _config(kafka, topic, output, checkpoint, alignedCheckpointTimeout="1s")
    marker = tmp_path / "marker"
    os.environ["UNALIGNED_CRASH_MARKER"] = str(marker)
    try:
        _run(config, tmp_path, crash_at="task_fail_during_replay@1")
    finally:
        os.environ.pop("UNALIGNED_CRASH_MARKER", None)
    assert marker.exists() and "task_fail_during_replay@1" in marker.read_text()
    prefix = config["extra_sink_options"]["transactionalIdPrefix"]
    _assert_exactly_once_in_order(kafka, output, expected, checkpoint, prefix)


@pytest.mark.slow
def test_target_batch_duration_keeps_batches_near_the_target_behind_a_slow_udf(
    kafka: EmbeddedKafka, new_topic: Any, spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import BinaryType

    topic = new_topic(partitions=2)
    kafka.produce(topic, [(i % 2, None, b"v%05d" % i, None, None) for i in range(6000)])

    @udf(BinaryType())
    def slow(value: bytes) -> bytes:
        # 4 ms per row: 250 rows/s per task, so that a 3 s batch stays well under the first
        # batch's 2,000 rows however fast the source reads
        time.sleep(0.004)
        return value

    stream = kafka_stream(spark, kafka, topic, targetBatchDuration="3s")
    query = (
        stream.select(slow("value").alias("value"))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = [p["numInputRows"] for p in progress]
    durations = [p["durationMs"]["triggerExecution"] for p in progress]
    assert sum(rows) == 6000
    assert rows[0] == 2000, rows  # first batch: 1,000 rows per partition before any measurement
    # The first batch ran far past the 3 s target (warm-up plus 2,000 slow rows); every later
    # batch is sized from the measured throughput: smaller than the first, never more than 4x
    # the batch before it, and near the target. The sizes follow the measured throughput, so
    # they may dip by a few rows after a batch that ran a little over the target.
    steady, steady_rows = durations[1:-1], rows[1:-1]
    assert len(steady) >= 2 and all(r < rows[0] for r in steady_rows), (rows, durations)
    assert all(b <= 4 * a for a, b in zip(rows[1:], rows[2:], strict=False)), (rows, durations)
    assert all(900 <= d <= 6000 for d in steady), (rows, durations)
