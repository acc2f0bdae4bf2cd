"""Changing a query's parallelism with rows pending in channel state, end to end: a real broker,
Spark, a slow sink that leaves channel state pending, then a restart of the same checkpoint
with another ``readTasks``, more partitions, or another task count behind a shuffle.

Every record is read back (Kafka: with kcat, librdkafka, read_committed; files: the manifest)
and checked once and, per key, in the order of its sequence number, which is the order the
source read it. Each run is a subprocess (``query_runner.py``) so that a crash point can kill it
right after a batch left channel state pending.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from harness import kcat_read_committed
from unaligned.barriers.metrics import read_metrics
from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.files.committed_files import read_committed_files
from unaligned.testing import EmbeddedKafka, topic_records

pytestmark = pytest.mark.slow

RUNNER = Path(__file__).with_name("query_runner.py")
KEYS_PER_PARTITION = 5
VALUE_BYTES = 1000
THROTTLE_BYTES_PER_S = 200_000  # per sink task's producer: 600 KB a task takes 3 s, cut at 1 s


# --- input with per-key sequence numbers -------------------------------------------------------


class Input:
    """Records ``<key>:s<seq>:`` per topic-partition (``<tag><partition>-k<n>`` keys); ``seq``
    counts per key."""

    def __init__(self, kafka: EmbeddedKafka) -> None:
        self.kafka = kafka
        self.sent: dict[str, int] = defaultdict(int)  # key -> records sent

    def produce(
        self,
        topic: str,
        tag: str,
        partitions: Iterable[int],
        per_partition: int,
        *,
        fresh: bool = False,
    ) -> None:
        """``fresh``: through a new producer (the shared one's metadata may not know
        partitions just added)."""
        records = []
        for partition in partitions:
            for i in range(per_partition):
                key = f"{tag}{partition}-k{i % KEYS_PER_PARTITION}"
                value = f"{key}:s{self.sent[key]:06d}:".encode().ljust(VALUE_BYTES, b"x")
                self.sent[key] += 1
                records.append((partition, key.encode(), value, None, None))
        if not fresh:
            self.kafka.produce(topic, records)
            return
        producer = topic_records.new_producer(self.kafka.bootstrap_servers, 60)
        try:
            topic_records.send_and_wait(producer, topic, records, 60)
        finally:
            producer.close()

    def check(self, values: Iterable[bytes | str]) -> None:
        """Every record once, and per key in sequence order."""
        got: dict[str, list[int]] = defaultdict(list)
        for value in values:
            text = value.decode() if isinstance(value, bytes) else value
            key, seq = text.split(":")[:2]
            got[key].append(int(seq[1:]))
        assert sorted(got) == sorted(self.sent), "keys missing or unknown"
        for key, count in self.sent.items():
            seqs = got[key]
            assert sorted(seqs) == list(range(count)), f"key {key}: not every record once"
            assert seqs == list(range(count)), f"key {key}: out of order {_first_swap(seqs)}"


def _first_swap(seqs: list[int]) -> str:
    for i in range(1, len(seqs)):
        if seqs[i] < seqs[i - 1]:
            return f"at {i}: {seqs[max(0, i - 3) : i + 3]}"
    return ""


# --- running the query --------------------------------------------------------------------------


def run(config: dict[str, Any], tmp_path: Path, crash_at: str | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNALIGNED_CRASH")}
    if crash_at:
        env["UNALIGNED_CRASH_AT"] = crash_at
    log = tmp_path / f"run-{time.monotonic_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, str(RUNNER), json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            timeout=420,
        )
    return proc.returncode, log.read_text()


def run_ok(config: dict[str, Any], tmp_path: Path) -> None:
    code, output = run(config, tmp_path)
    assert code == 0, f"query failed ({code}):\n{output[-6000:]}"


def leave_state_pending(
    config: dict[str, Any], tmp_path: Path, kafka: EmbeddedKafka | None
) -> None:
    """Run ``config`` killed right after batch 0 committed; batch 0 must have left channel
    state pending (a throttled broker for a Kafka sink, or a slow step before the sink)."""
    if kafka is not None:
        kafka.throttle_producers(THROTTLE_BYTES_PER_S)
    try:
        code, output = run(config, tmp_path, crash_at="driver_after_sink_commit@0")
    finally:
        if kafka is not None:
            kafka.throttle_producers(None)
    assert code == -9, f"no kill after batch 0:\n{output[-4000:]}"
    record = CommitLog(Checkpoint.resolve(config["checkpoint"])).read(0)
    assert record is not None and record.channel_state, "batch 0 left no channel state"


def config_for(
    kafka: EmbeddedKafka, topics: str, checkpoint: Path, read_tasks: int, **extra: Any
) -> dict[str, Any]:
    sink = {"alignedCheckpointTimeout": "1s", "chunkRows": "50"}
    if "output_topic" in extra:
        sink["maxUnacknowledgedBytes"] = "65536"  # the throttled broker acknowledges slowly
    return {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topics,
        "checkpoint": str(checkpoint),
        "max_offsets": 100_000,
        "source_options": {"readTasks": read_tasks},
        "extra_sink_options": sink,
        **extra,
    }


def layout_drains(checkpoint: Path) -> list[int]:
    """Batches whose source offset is a layout drain; each must have cut nothing."""
    resolved = Checkpoint.resolve(str(checkpoint))
    drains = []
    for batch_id in range((resolved.last_logged_batch() or 0) + 1):
        offsets = [s.offset for s in read_offset_log(resolved, batch_id).sources]
        if any(isinstance(o, dict) and o.get("layoutDrain") for o in offsets):
            drains.append(batch_id)
    metrics = {m.batch_id: m for m in read_metrics(resolved)}
    log = CommitLog(resolved)
    for batch_id in drains:
        record = log.read(batch_id)
        assert record is not None and record.channel_state == {}, f"drain {batch_id} left state"
        # a drain rolled forward after a crash has no metrics (its tasks wrote nothing again)
        if batch_id in metrics:
            assert metrics[batch_id].mode == "aligned", f"layout drain {batch_id} cut"
    return drains


def nothing_left(checkpoint: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    latest = log.read(log.decided_batch_ids()[-1])
    assert latest is not None and latest.channel_state == {}, "channel state left pending"


@pytest.fixture
def records(kafka: EmbeddedKafka) -> Input:
    """The test's input records (and what was sent of each key)."""
    return Input(kafka)


# --- Kafka -> Kafka ----------------------------------------------------------------------------


# 4 -> 2 for Kafka runs in the hard-kill tests below; the files target takes 4 -> 2 too
@pytest.mark.parametrize(("before", "after"), [(2, 4)], ids=["2to4"])
def test_kafka_to_kafka_with_rows_pending_under_another_read_task_count(
    kafka: EmbeddedKafka, new_topic: Any, records: Input, tmp_path: Path, before: int, after: int
) -> None:
    topic, output = new_topic(partitions=4), new_topic(partitions=4)
    records.produce(topic, "a", range(4), 300)
    checkpoint = tmp_path / "checkpoint"
    config = config_for(kafka, topic, checkpoint, before, output_topic=output)
    leave_state_pending(config, tmp_path, kafka)
    records.produce(topic, "a", range(4), 100)  # new rows for every partition, every task
    run_ok(dict(config, source_options={"readTasks": after}), tmp_path)

    records.check(r["value"] for r in kcat_read_committed(kafka.bootstrap_servers, output))
    assert layout_drains(checkpoint) == [1], "one layout drain, right after the restart"
    nothing_left(checkpoint)


@pytest.mark.parametrize("crash_at", ["task_after_precommit@1", "driver_after_commit_record@1"])
def test_a_hard_kill_in_the_layout_drain_then_a_restart_is_exactly_once_in_order(
    kafka: EmbeddedKafka, new_topic: Any, records: Input, tmp_path: Path, crash_at: str
) -> None:
    """Killed while the layout drain's tasks had prepared the pending rows (nothing decided), or
    right after its decision: the restart re-runs the drain from Spark's offset log at the old
    task count, then reads on with the new one."""
    topic, output = new_topic(partitions=4), new_topic(partitions=4)
    records.produce(topic, "a", range(4), 300)
    checkpoint = tmp_path / "checkpoint"
    config = config_for(kafka, topic, checkpoint, 4, output_topic=output)
    leave_state_pending(config, tmp_path, kafka)
    records.produce(topic, "a", range(4), 100)
    rescaled = dict(config, source_options={"readTasks": 2})
    code, output_text = run(rescaled, tmp_path, crash_at=crash_at)
    assert code == -9, f"no kill at {crash_at}:\n{output_text[-4000:]}"
    run_ok(rescaled, tmp_path)

    records.check(r["value"] for r in kcat_read_committed(kafka.bootstrap_servers, output))
    assert layout_drains(checkpoint) == [1]
    nothing_left(checkpoint)


def test_kafka_to_kafka_with_rows_pending_when_partitions_were_added(
    kafka: EmbeddedKafka, new_topic: Any, records: Input, tmp_path: Path
) -> None:
    """Two topics of two partitions on 4 read tasks; the first grows to 4 partitions while rows
    are pending: the second topic's partitions move to other tasks (round robin in
    topic-partition order)."""
    grown, other, output = new_topic(partitions=2), new_topic(partitions=2), new_topic(partitions=4)
    records.produce(grown, "a", range(2), 300)
    records.produce(other, "b", range(2), 300)
    checkpoint = tmp_path / "checkpoint"
    config = config_for(kafka, f"{grown},{other}", checkpoint, 4, output_topic=output)
    leave_state_pending(config, tmp_path, kafka)
    kafka.add_partitions(grown, 4)
    records.produce(grown, "a", range(4), 100, fresh=True)
    records.produce(other, "b", range(2), 100)
    run_ok(config, tmp_path)

    records.check(r["value"] for r in kcat_read_committed(kafka.bootstrap_servers, output))
    assert layout_drains(checkpoint) == [1]
    nothing_left(checkpoint)


def test_a_shuffle_before_the_sink_with_another_task_count_is_refused_and_loses_nothing(
    kafka: EmbeddedKafka, new_topic: Any, records: Input, tmp_path: Path
) -> None:
    """``repartition(n, "partition")`` before the sink: its tasks are Spark's. Restarted with
    another ``n`` while rows are pending, the batch is refused at the decision (nothing
    committed); the way out (the old settings until nothing is pending, then the new ones)
    writes every record once, in order."""
    topic, output = new_topic(partitions=4), new_topic(partitions=4)
    records.produce(topic, "a", range(4), 300)
    checkpoint = tmp_path / "checkpoint"
    old = config_for(
        kafka,
        topic,
        checkpoint,
        4,
        output_topic=output,
        shuffle_before_sink=True,
        spark_conf={"spark.sql.shuffle.partitions": 4},
    )
    leave_state_pending(old, tmp_path, kafka)
    before = kcat_read_committed(kafka.bootstrap_servers, output)
    records.produce(topic, "a", range(4), 100)

    new = dict(old, spark_conf={"spark.sql.shuffle.partitions": 2})
    code, text = run(new, tmp_path)
    assert code != 0, "a batch with pending state for 4 sink tasks ran with 2"
    assert "PendingStateLayoutError" in text and "is not decided" in text, text[-4000:]
    assert "trigger(availableNow=True)" in text
    assert kcat_read_committed(kafka.bootstrap_servers, output) == before, "something committed"

    run_ok(old, tmp_path)  # the old settings, availableNow: until nothing is pending
    nothing_left(checkpoint)
    records.produce(topic, "a", range(4), 50)
    run_ok(new, tmp_path)
    records.check(r["value"] for r in kcat_read_committed(kafka.bootstrap_servers, output))


# --- Kafka -> files ------------------------------------------------------------------------------


# 2 -> 4 runs with the Kafka target above: the pending rows' new layout is the source's, not
# the sink's
@pytest.mark.parametrize(("before", "after"), [(4, 2)], ids=["4to2"])
def test_kafka_to_files_with_rows_pending_under_another_read_task_count(
    kafka: EmbeddedKafka, new_topic: Any, records: Input, tmp_path: Path, before: int, after: int
) -> None:
    """A slow step before the file sink on partition 2 (alone on its task with 4 read tasks,
    the second partition of task 0 with 2) leaves its rows pending."""
    topic = new_topic(partitions=4)
    records.produce(topic, "a", range(4), 200)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    config = config_for(
        kafka, topic, checkpoint, before, output_path=str(out), slow_partition=2, slow_ms_per_row=15
    )
    leave_state_pending(config, tmp_path, None)
    records.produce(topic, "a", range(4), 50)
    fast = {k: v for k, v in config.items() if not k.startswith("slow_")}
    run_ok(dict(fast, source_options={"readTasks": after}), tmp_path)

    table = read_committed_files(str(out), columns=["value"])
    records.check(table.column("value").to_pylist())
    assert layout_drains(checkpoint) == [1]
    nothing_left(checkpoint)
