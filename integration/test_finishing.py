"""The finishing protocol end to end (issue 9): bounded input under a processing-time trigger
ends with one final checkpoint that writes the channel state still pending when the input
ended, and ``unaligned.await_finished`` stops the query; nothing is left open."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unaligned
from harness import kafka_stream, produce_skewed
from unaligned.barriers.metrics import read_metrics
from unaligned.finishing import finished_batch
from unaligned.kafka.transaction_states import list_transactional_ids
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


def test_bounded_input_ends_with_a_final_checkpoint_that_writes_pending_state(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path, throttled: None
) -> None:
    topic, output = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    expected = produce_skewed(kafka, topic, [HOT] + [COLD] * (PARTITIONS - 1), VALUE_BYTES)
    total = sum(len(v) for v in expected.values())
    checkpoint = str(tmp_path / "checkpoint")
    prefix = f"fin-{tmp_path.name}"
    query = (
        kafka_stream(
            spark, kafka, topic, endingOffsets="latest", maxOffsetsPerTrigger=str(total - 40)
        )
        .select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", checkpoint)
        .option("transactionalIdPrefix", prefix)
        .option("alignedCheckpointTimeout", "1s")
        .option("chunkRows", "100")
        .option("maxUnacknowledgedBytes", "65536")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        assert unaligned.await_finished(query, checkpoint, timeout_s=240)
    finally:
        if query.isActive:
            query.stop()
    assert not query.isActive

    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        got[record.partition].append(record.value)
    assert dict(got) == expected, "not every record exactly once, in order"
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)
    assert list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix) == []

    final = finished_batch(checkpoint)
    assert final is not None
    metrics = {m.batch_id: m for m in read_metrics(checkpoint)}
    assert any(m.mode == "unaligned" for b, m in metrics.items() if b < final), (
        "no barrier before the final one cut: the test did not have state pending at the end"
    )
    assert metrics[final].mode == "aligned" and metrics[final].rows_replayed > 0
    log = CommitLog.under_checkpoint(checkpoint)
    record = log.read(final)
    assert record is not None and record.channel_state == {} and log.is_done(final)
    state = Path(checkpoint) / "unaligned" / "channel-state"
    assert not [p for p in state.rglob("*") if p.is_file()]
