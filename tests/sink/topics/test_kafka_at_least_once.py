"""The at-least-once Kafka participant's driver side: nothing to commit, abort or clean up
(records are visible once acknowledged), items named by their producer; its commit records
cannot be read by the exactly-once sink. Writing, and a crash that duplicates but loses
nothing: integration/test_at_least_once_sink.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError
from unaligned.kafka.produce.producer_modes import WrittenRecords
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.recovery import check_participant
from unaligned.sink.topics.kafka_at_least_once import PARTICIPANT, KafkaAtLeastOnceParticipant
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_items import written_to_json
from unaligned.sink.topics.kafka_participant import KafkaParticipant


def _target(tmp_path: Path) -> KafkaTarget:
    target = SinkOptions.parse(
        {
            "checkpointlocation": str(tmp_path),
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "topic": "t",
            "deliveryGuarantee": "at-least-once",
        }
    ).target
    assert isinstance(target, KafkaTarget)
    return target


def _participant(tmp_path: Path) -> KafkaAtLeastOnceParticipant:
    target = _target(tmp_path)
    columns = kafka_columns(StructType([StructField("value", StringType())]), target)
    return KafkaAtLeastOnceParticipant(target, columns, "unaligned-q")


def test_items_name_their_producer_and_the_driver_has_nothing_to_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    participant = _participant(tmp_path)
    item = written_to_json(WrittenRecords(7, 0, 12), partition_id=3)
    assert item == {"producerId": 7, "epoch": 0, "recordCount": 12, "partition": 3}
    assert participant.item_key(item) == "7:0"
    assert "12 record(s) of idempotent producer id 7" in participant.describe(item)
    assert participant.consolidate([item], 1) == [item]
    participant.check_decidable([item], 1)  # acknowledged records are always decidable
    done: list[int] = []
    participant.commit([item, item], 1, done.append)
    assert done == [2]
    participant.abort([item], 1)
    assert (
        "stay visible; another attempt, or the batch's next run, writes them again" in caplog.text
    )
    assert participant.clean_up(CommitLog(Checkpoint.resolve(str(tmp_path))), None) == 0
    assert participant.client_kwargs()["client_id"].startswith("producer-unaligned-q-")


def test_a_checkpoint_does_not_switch_guarantees(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    record = CommitRecord(0, PARTICIPANT, (), 0, {})
    target = _target(tmp_path)
    columns = kafka_columns(StructType([StructField("value", StringType())]), target)
    exactly_once = KafkaParticipant(target, columns, "p")
    with pytest.raises(CommitLogError, match="'kafka-at-least-once' sink.*'kafka' sink"):
        check_participant(record, exactly_once, log)
    check_participant(record, _participant(tmp_path), log)
