"""What one partition's ``Fetch`` answer means (read_answer), on answers kafka-python decodes."""

from __future__ import annotations

import kafka.errors as kafka_errors
import pytest
from kafka.protocol.consumer import FetchResponse

from unaligned.kafka.fetch.fetch_answers import fetch_settings, read_answer
from unaligned.kafka.partitions import TopicPartitionId

TP = TopicPartitionId("t", 0)
PARTITION = FetchResponse.FetchableTopicResponse.PartitionData


def data(error: type = kafka_errors.NoError, replica: int = -1, records: bytes = b"r") -> object:
    return PARTITION(
        partition_index=0,
        error_code=error.errno if error is not kafka_errors.NoError else 0,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=2,
        aborted_transactions=None,
        preferred_read_replica=replica,
        records=records,
    )


def test_records_come_with_the_epoch_asked_at_and_the_replica_the_leader_names() -> None:
    answer, replica = read_answer(TP, data(replica=3), kafka_errors.NoError, 7, False)
    assert answer.error is None and answer.records == b"r" and answer.leader_epoch == 7
    assert (answer.log_start_offset, answer.high_watermark) == (2, 10)
    assert replica == 3
    assert read_answer(TP, data(), kafka_errors.NoError, 7, False)[1] == -1


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.NotLeaderForPartitionError,
        kafka_errors.FencedLeaderEpochError,
        kafka_errors.UnknownLeaderEpochError,
        kafka_errors.ReplicaNotAvailableError,
        kafka_errors.KafkaStorageError,
        kafka_errors.OffsetNotAvailableError,
        kafka_errors.LeaderNotAvailableError,
        kafka_errors.UnknownTopicOrPartitionError,
    ],
)
def test_a_moved_or_fenced_leader_is_asked_again(error: type) -> None:
    answer, _ = read_answer(TP, data(error), kafka_errors.NoError, 7, False)
    assert isinstance(answer.error, error) and answer.retriable


def test_out_of_range_is_retriable_from_a_replica_only() -> None:
    from_leader, _ = read_answer(
        TP, data(kafka_errors.OffsetOutOfRangeError), kafka_errors.NoError, 1, False
    )
    assert isinstance(from_leader.error, kafka_errors.OffsetOutOfRangeError)
    assert not from_leader.retriable
    from_replica, _ = read_answer(
        TP, data(kafka_errors.OffsetOutOfRangeError), kafka_errors.NoError, 1, True
    )
    assert from_replica.retriable


def test_a_refusal_is_not_retriable_and_a_top_level_error_applies_to_every_partition() -> None:
    refused, _ = read_answer(
        TP, data(kafka_errors.TopicAuthorizationFailedError), kafka_errors.NoError, 1, False
    )
    assert not refused.retriable
    top, _ = read_answer(TP, data(), kafka_errors.NotLeaderForPartitionError, 1, False)
    assert isinstance(top.error, kafka_errors.NotLeaderForPartitionError) and top.retriable


def test_settings_take_the_rack_and_the_metadata_age_as_the_replicas_lifetime() -> None:
    settings = fetch_settings({"client_rack": "az-1", "metadata_max_age_ms": 60_000}, True)
    assert settings.rack_id == "az-1" and settings.replica_ttl_s == 60.0 and settings.read_committed
    plain = fetch_settings({}, False)
    assert plain.rack_id == "" and plain.replica_ttl_s == 300.0
