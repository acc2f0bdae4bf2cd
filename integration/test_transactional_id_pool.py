"""The Kafka sink's transactional ids against the real broker (issue 8, scenarios 1, 5, 10, 11).

- Bounded pool: a query reuses one id per sink task once the previous transaction committed.
- Two attempts with the same ``attemptNumber`` (a stage retried: numbers restart at 0) never
  share an id while both are open; the loser is fenced by clean-up and never becomes visible.
- A batch is never decided with a transaction that cannot commit any more: fenced by a zombie,
  or too close to the broker's transaction timeout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from harness import wait_until
from unaligned.checkpoint import Checkpoint
from unaligned.errors import TransactionExpiredError
from unaligned.kafka.transactions import transaction_coordinator, transaction_states
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_participant import KafkaParticipant
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
    ]
)


def _participant(
    kafka: EmbeddedKafka, topic: str, checkpoint: str, **extra: str
) -> KafkaParticipant:
    options = SinkOptions.parse(
        {
            "checkpointLocation": checkpoint,
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "topic": topic,
            **extra,
        }
    )
    target = options.target
    assert isinstance(target, KafkaTarget)
    return KafkaParticipant(target, kafka_columns(SCHEMA, target), f"pool-{uuid.uuid4().hex[:8]}")


def _chunk(values: list[str], partition: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": [v.encode() for v in values],
            "value": [v.encode() for v in values],
            "partition": [partition] * len(values),
        }
    )


def _prepare(
    participant: KafkaParticipant, batch: int, partition: int, attempt: int, values: list[str]
) -> Mapping[str, Any]:
    task = participant.open_task(batch, partition, attempt)
    try:
        task.write_chunk(_chunk(values, partition))
        return task.prepare()
    finally:
        task.close()


def _decide_and_commit(
    participant: KafkaParticipant, log: CommitLog, batch: int, items: list[Any]
) -> None:
    participant.check_decidable(items, batch)
    assert log.write(CommitRecord(batch, participant.kind, tuple(items), int(time.time() * 1000)))
    participant.commit(items, batch, lambda n: None)
    log.mark_done(batch)
    participant.clean_up(log, batch)


def _committed_values(kafka: EmbeddedKafka, topic: str) -> list[str]:
    return sorted(r.value.decode() for r in kafka.consume_all(topic, read_committed=True))


def test_the_pool_holds_two_ids_per_task_however_many_batches(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Any
) -> None:
    topic = new_topic(partitions=2)
    participant = _participant(kafka, topic, str(tmp_path))
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    used: set[str] = set()
    batches = 10
    for batch in range(batches):
        items = [_prepare(participant, batch, p, 0, [f"b{batch}-p{p}"]) for p in range(2)]
        used.update(str(item["transactionalId"]) for item in items)
        _decide_and_commit(participant, log, batch, items)
    # slot 0 in even batches, 1 in odd ones (a zombie of a batch never meets the next one)
    assert used == {participant.transactional_id(p, s) for p in range(2) for s in (0, 1)}
    expected = sorted(f"b{b}-p{p}" for b in range(batches) for p in range(2))
    assert _committed_values(kafka, topic) == expected
    assert kafka.last_stable_offsets(topic) == kafka.end_offsets(topic)


def test_a_retried_stage_attempt_never_shares_an_id_with_its_zombie(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Any
) -> None:
    """Stage attempt 0's task (attemptNumber 0) is still open - a zombie - when stage attempt 1
    runs the same partition, again with attemptNumber 0. The two get different ids; only the
    attempt the driver commits is visible, and clean-up fences the zombie."""
    topic = new_topic(partitions=1)
    participant = _participant(kafka, topic, str(tmp_path))
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    zombie = participant.open_task(0, 0, 0)
    try:
        zombie.write_chunk(_chunk(["zombie"], 0))
        zombie_item = zombie.prepare()
        retried = _prepare(participant, 0, 0, 0, ["retried"])
        assert retried["transactionalId"] != zombie_item["transactionalId"]
        _decide_and_commit(participant, log, 0, [retried])
    finally:
        zombie.close()
    assert _committed_values(kafka, topic) == ["retried"]
    wait_until(
        lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic),
        "the zombie's transaction fenced (last stable offset at the end)",
    )
    prefix = participant.id_stem
    client = {"bootstrap_servers": kafka.bootstrap_servers}
    assert transaction_states.list_transactional_ids(client, prefix) == []


def test_a_batch_with_a_fenced_transaction_is_not_decided(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Any
) -> None:
    """A zombie's ``init_transactions`` on the same id (or any fence) aborted the prepared
    transaction: the driver refuses to decide, aborts the rest, and names what happened."""
    topic = new_topic(partitions=2)
    participant = _participant(kafka, topic, str(tmp_path))
    items = [_prepare(participant, 0, p, 0, [f"v{p}"]) for p in range(2)]
    transaction_coordinator.fence(participant.client_kwargs(), str(items[0]["transactionalId"]))
    with pytest.raises(TransactionExpiredError, match="another attempt of the task") as raised:
        participant.check_decidable(items, 0)
    assert str(items[0]["transactionalId"]) in str(raised.value)
    assert "restart the query" in str(raised.value)
    assert "kafka.transaction.timeout.ms" not in str(raised.value)  # not a timeout: no such advice
    wait_until(lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic), "both aborted")
    assert _committed_values(kafka, topic) == []


def test_a_transaction_near_its_timeout_is_not_decided(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Any
) -> None:
    """Scenario 1: the first wave's transactions of a long batch would be aborted by the broker
    before the commit could reach them. With a 6 s timeout and 5 s needed to commit, a
    transaction prepared 1.5 s ago cannot be decided; a fresh one with a long timeout can."""
    topic = new_topic(partitions=1)
    short = _participant(kafka, topic, str(tmp_path), **{"kafka.transaction.timeout.ms": "6000"})
    item = _prepare(short, 0, 0, 0, ["late"])
    time.sleep(1.5)
    with pytest.raises(TransactionExpiredError, match=r"began \d+\.\d s ago"):
        short.check_decidable([item], 0)
    roomy = _participant(kafka, topic, str(tmp_path / "b"))
    fresh = _prepare(roomy, 0, 0, 0, ["fresh"])
    roomy.check_decidable([fresh], 0)
    roomy.commit([fresh], 0, lambda n: None)
    assert _committed_values(kafka, topic) == ["fresh"]


@pytest.mark.parametrize(
    "holder, rival",
    [((0, 0), (0, 1)), ((1, 0), (0, 0))],
    ids=["speculative_copy", "zombie_of_the_previous_batch"],
)
def test_two_attempts_racing_for_a_slot_never_fence_each_other(
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Any,
    holder: tuple[int, int],
    rival: tuple[int, int],
) -> None:
    """Issue 21 item 6. The holder (``(batch, attemptNumber)``) has claimed its id
    (``InitProducerId`` done, nothing written: the coordinator has it ``Empty``, as free as an
    unused id) when a rival attempt of the same task claims one: a speculative copy (attempt 1
    of the same batch), or a zombie of the previous batch that checked for a decision before
    that batch was decided and claims only now, while the next batch runs. The previous design
    ("the first id with no open transaction from attemptNumber on") gave both the same id, and
    the rival's ``InitProducerId`` fenced the holder. Each lane has its own slots: the holder
    prepares unfenced, its batch is decided and committed, the rival's transaction is fenced by
    clean-up and never visible; read back once (read_committed)."""
    topic = new_topic(partitions=1)
    participant = _participant(kafka, topic, str(tmp_path))
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    held = participant.open_task(holder[0], 0, holder[1])  # claimed, held before its first write
    try:
        late = participant.open_task(rival[0], 0, rival[1])
        try:
            late.write_chunk(_chunk(["rival"], 0))
            rival_item = late.prepare()
        finally:
            late.close()
        held.write_chunk(_chunk(["holder"], 0))
        held_item = held.prepare()
    finally:
        held.close()
    assert held_item["transactionalId"] != rival_item["transactionalId"]
    participant.check_decidable([held_item], holder[0])  # the holder was not fenced
    _decide_and_commit(participant, log, holder[0], [held_item])  # clean-up fences the rival
    wait_until(
        lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic),
        "every transaction committed or fenced",
    )
    assert _committed_values(kafka, topic) == ["holder"]  # once, and nothing of the rival
