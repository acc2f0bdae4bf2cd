"""The finishing protocol end to end (issue 9): bounded input under a processing-time trigger
ends with one final checkpoint that writes the channel state still pending when the input
ended, and ``unaligned.await_finished`` stops the query; nothing is left open. Stops with and
without drain (``unaligned.stop``), then a restart: exactly once."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unaligned
from harness import (
    assert_no_stray_files,
    committed_values,
    kafka_stream,
    produce_skewed,
    wait_until,
)
from unaligned.barriers.metrics import read_metrics
from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import Checkpoint
from unaligned.finishing import finished_batch
from unaligned.kafka.transactions.transaction_states import list_transactional_ids
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

PARTITIONS = 4
HOT, COLD, VALUE_BYTES = 1200, 200, 1000


@pytest.fixture
def throttled(kafka: EmbeddedKafka) -> Iterator[None]:
    kafka.throttle_producers(200_000)  # per sink task: the hot task needs about 6 s
    try:
        yield
    finally:
        kafka.throttle_producers(None)


def to_kafka(df: Any, kafka: EmbeddedKafka, output: str, checkpoint: str, cut: bool) -> Any:
    """``df``'s key, value and partition to ``output`` exactly once; with ``cut``, barriers
    past 1 s cut small chunks (channel state on a throttled broker)."""
    writer = (
        df.select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", checkpoint)
    )
    if cut:
        writer = (
            writer.option("alignedCheckpointTimeout", "1s")
            .option("chunkRows", "100")
            .option("maxUnacknowledgedBytes", "65536")
        )
    return writer


def run_to_the_end(query: Any, checkpoint: str) -> None:
    """``unaligned.await_finished``; the query is stopped whatever happens."""
    try:
        assert unaligned.await_finished(query, checkpoint, timeout_s=240)
    finally:
        if query.isActive:
            query.stop()
    assert not query.isActive


def test_bounded_input_ends_with_a_final_checkpoint_that_writes_pending_state(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path, throttled: None
) -> None:
    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    expected = produce_skewed(kafka, topic, [HOT] + [COLD] * (PARTITIONS - 1), VALUE_BYTES)
    total = sum(len(v) for v in expected.values())
    checkpoint = str(tmp_path / "checkpoint")
    prefix = f"fin-{tmp_path.name}"
    df = kafka_stream(
        spark, kafka, topic, endingOffsets="latest", maxOffsetsPerTrigger=str(total - 40)
    )
    query = (
        to_kafka(df, kafka, output, checkpoint, cut=True)
        .option("transactionalIdPrefix", prefix)
        .trigger(processingTime="1 second")
        .start()
    )
    run_to_the_end(query, checkpoint)

    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        got[record.partition].append(record.value)
    assert dict(got) == expected, "not every record exactly once, in order"
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    assert list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix) == []

    final = finished_batch(Checkpoint.resolve(checkpoint))
    assert final is not None
    metrics = {m.batch_id: m for m in read_metrics(Checkpoint.resolve(checkpoint))}
    assert any(m.mode == "unaligned" for b, m in metrics.items() if b < final), (
        "no barrier before the final one cut: the test did not have state pending at the end"
    )
    assert metrics[final].mode == "aligned" and metrics[final].rows_replayed > 0
    log = CommitLog(Checkpoint.resolve(checkpoint))
    record = log.read(final)
    assert record is not None and record.channel_state == {} and log.is_done(final)
    state = Path(checkpoint) / "unaligned" / "channel-state"
    assert not [p for p in state.rglob("*") if p.is_file()]


def test_bounded_input_ends_with_a_final_checkpoint_through_the_file_sink(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    expected = produce_skewed(kafka, topic, [400, 100, 100, 100], 200)
    checkpoint, out = str(tmp_path / "checkpoint"), tmp_path / "out"
    query = (
        kafka_stream(spark, kafka, topic, endingOffsets="latest", maxOffsetsPerTrigger="300")
        .select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("path", str(out))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    run_to_the_end(query, checkpoint)
    assert committed_values(out) == expected
    assert_no_stray_files(out)
    assert not list((tmp_path / "checkpoint" / "unaligned" / "channel-state").rglob("*.avro"))
    assert finished_batch(Checkpoint.resolve(checkpoint)) is not None


class Producer:
    """Keeps producing ``<partition>:<n>`` records to every partition until stopped."""

    def __init__(self, kafka: EmbeddedKafka, topic: str) -> None:
        self._kafka, self._topic = kafka, topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            n = self.sent
            values = [(p, f"{p}:{n + i:06d}".encode()) for i in range(50) for p in range(4)]
            self._kafka.produce(self._topic, ((p, v, v, None, None) for p, v in values))
            self.sent += 50
            time.sleep(0.05)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def read_back(kafka: EmbeddedKafka, topic: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(topic, read_committed=True):
        got[record.partition].append(record.value)
    return dict(got)


def test_a_drain_under_load_reads_up_to_the_frozen_end_and_a_restart_reads_the_rest(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    checkpoint = str(tmp_path / "checkpoint")

    def writer() -> Any:
        df = kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="2000")
        return to_kafka(df, kafka, output, checkpoint, cut=False)

    with Producer(kafka, topic) as producer:
        query = writer().trigger(processingTime="1 second").start()
        try:
            wait_until(lambda: producer.sent >= 1000, "records to read", timeout_s=60)
            unaligned.stop(query, checkpoint, drain=True, timeout_s=240)
        finally:
            if query.isActive:
                query.stop()
        wait_until(lambda: producer.sent >= 3000, "records after the drain", timeout_s=60)
    assert not query.isActive
    final = finished_batch(Checkpoint.resolve(checkpoint))
    assert final is not None
    (frozen,) = [s.offset for s in read_offset_log(Checkpoint.resolve(checkpoint), final).sources]
    assert frozen["drained"] is True and frozen["endOfData"] is True
    ends = {int(p): end for p, end in frozen["ending"][topic].items()}
    produced = read_back(kafka, topic)
    assert ends and all(len(produced[p]) > ends[p] for p in ends), (
        "nothing produced after the drain"
    )
    assert read_back(kafka, output) == {p: produced[p][: ends[p]] for p in ends}
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)

    again = writer().trigger(availableNow=True).start()
    again.awaitTermination(240)
    assert read_back(kafka, output) == produced  # the rest, exactly once, in order


def test_a_stop_without_drain_keeps_pending_state_and_a_restart_resumes_exactly_there(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path, throttled: None
) -> None:
    # The hot task gets about 1,200 rows (1.2 MB) a batch: far more than the quota lets through
    # in the 1 s before the deadline, and enough that rows are still left when the throttle is
    # felt (the broker throttles the request after the one over the quota). With 400 rows a
    # batch the throttle could land on the last chunk, and no barrier cut.
    counts = [2 * HOT] + [COLD] * (PARTITIONS - 1)
    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    expected = produce_skewed(kafka, topic, counts, VALUE_BYTES)
    checkpoint = str(tmp_path / "checkpoint")
    df = kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger=str(sum(counts) // 2))
    query = (
        to_kafka(df, kafka, output, checkpoint, cut=True).trigger(processingTime="1 second").start()
    )
    log = CommitLog(Checkpoint.resolve(checkpoint))
    try:
        wait_until(
            lambda: any(log.read(b).channel_state for b in log.decided_batch_ids()),
            "a barrier that cut",
            timeout_s=120,
        )
        unaligned.stop(query, checkpoint, drain=False, timeout_s=240)
    finally:
        if query.isActive:
            query.stop()
    last = log.read(log.decided_batch_ids()[-1])
    assert last is not None and log.is_done(last.batch_id)
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)  # nothing open
    assert finished_batch(Checkpoint.resolve(checkpoint)) is None
    kafka.throttle_producers(None)
    df = kafka_stream(spark, kafka, topic)
    again = to_kafka(df, kafka, output, checkpoint, cut=False).trigger(availableNow=True).start()
    again.awaitTermination(240)
    assert read_back(kafka, output) == expected
