"""The Kafka participant's pure parts: its transactional ids and prepared items as JSON. Anything
that talks to a broker is in integration/test_kafka_sink.py."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql.types import StringType, StructField, StructType

from unaligned.kafka.transactions import PreparedTransaction
from unaligned.sink.kafka_columns import kafka_columns
from unaligned.sink.kafka_participant import KafkaParticipant, prepared_from_json, prepared_to_json
from unaligned.sink.options import KafkaTarget, SinkOptions


def _participant(tmp_path: Path, prefix: str) -> KafkaParticipant:
    target = SinkOptions.parse(
        {
            "checkpointlocation": str(tmp_path),
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "topic": "t",
        }
    ).target
    assert isinstance(target, KafkaTarget)
    columns = kafka_columns(StructType([StructField("value", StringType())]), target)
    return KafkaParticipant(target, columns, prefix)


def test_only_the_sinks_own_transactional_ids_are_recognised(tmp_path: Path) -> None:
    participant = _participant(tmp_path, "app")
    assert participant.transactional_id(12, 3, 0) == "app-12-3-0"
    assert participant.batch_of("app-12-3-0") == 12
    # Another sink whose prefix merely starts with "app" is left alone by cleanup.
    for foreign in ("app-2-12-3-0", "apple-1-2-3", "app-1-2", "app-x-2-3"):
        assert participant.batch_of(foreign) is None, foreign


def test_a_prefix_with_regex_characters_matches_only_itself(tmp_path: Path) -> None:
    participant = _participant(tmp_path, "a.b+")
    assert participant.batch_of(participant.transactional_id(4, 0, 1)) == 4
    assert participant.batch_of("aXb+-4-0-1") is None
    assert participant.batch_of("a.bb-4-0-1") is None


def test_a_prepared_transaction_survives_the_commit_record_as_json(tmp_path: Path) -> None:
    prepared = PreparedTransaction(
        transactional_id="app-5-2-1", producer_id=4001, epoch=3, record_count=17
    )
    item = json.loads(json.dumps(prepared_to_json(prepared, 2)))
    assert item["partition"] == 2
    assert prepared_from_json(item) == prepared
    participant = _participant(tmp_path, "app")
    assert participant.item_key(item) == "app-5-2-1"
    assert participant.batch_of(participant.item_key(item)) == 5
