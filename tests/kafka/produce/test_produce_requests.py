"""Unit tests for unaligned.kafka.produce.produce_requests and coordinator_requests: no broker.

The first group pins the protocol shapes the sink's produce path relies on (its private
kafka-python names are pinned by tests/kafka/clients/test_client_internals.py); if one fails after a
kafka-python upgrade, re-check the module's sending rules before un-pinning. The behaviour
against a real broker (order, fencing, a broker stopped mid-write, refusals, splits) is
integration/test_produce_session.py."""

from __future__ import annotations

import kafka.errors as kafka_errors
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    ProduceRequest,
    ProduceResponse,
)

from unaligned.kafka.produce import produce_requests as pr
from unaligned.kafka.produce.produce_queue import PartitionQueue, QueuedBatch, produce_error
from unaligned.kafka.transactions import coordinator_requests

# --- protocol shapes the session speaks ---------------------------------------------------------


def test_requests_are_capped_at_the_versions_the_session_speaks() -> None:
    broker = BrokerVersionData((4, 2))
    produce = ProduceRequest(
        transactional_id="t",
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="x",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"")
                ],
            )
        ],
        min_version=3,
        max_version=9,
    )
    assert broker.api_version(produce) == 9  # v12+ would be transaction protocol v2
    init = InitProducerIdRequest(
        transactional_id="t",
        transaction_timeout_ms=60_000,
        producer_id=-1,
        producer_epoch=-1,
        max_version=4,
    )
    assert broker.api_version(init) == 4
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    add = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="t",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[topic(name="x", partitions=[0, 1])],
        max_version=3,
    )
    assert broker.api_version(add) == 3


# --- answers ------------------------------------------------------------------------------------


def _part(partition: int = 0) -> PartitionQueue:
    return PartitionQueue("x", partition)


def _produce_answer(partition: int, error_code: int, log_start: int = -1) -> ProduceResponse:
    topic = ProduceResponse.TopicProduceResponse
    return ProduceResponse(
        responses=[
            topic(
                name="x",
                partition_responses=[
                    topic.PartitionProduceResponse(
                        index=partition, error_code=error_code, log_start_offset=log_start
                    )
                ],
            )
        ]
    )


def test_a_written_or_already_written_batch_is_acknowledged() -> None:
    assert produce_error(_produce_answer(2, 0), _part(2)) is None
    duplicate = kafka_errors.DuplicateSequenceNumberError.errno
    assert produce_error(_produce_answer(2, duplicate), _part(2)) is None


def test_a_refusal_and_a_lost_request_are_errors_of_their_kind() -> None:
    too_large = kafka_errors.MessageSizeTooLargeError.errno
    error = produce_error(_produce_answer(0, too_large), _part())
    assert isinstance(error, kafka_errors.MessageSizeTooLargeError)
    lost = kafka_errors.KafkaConnectionError("socket disconnected")
    assert produce_error(lost, _part()) is lost
    missing = produce_error(_produce_answer(1, 0), _part(0))
    assert isinstance(missing, kafka_errors.KafkaError) and "no partition 0" in str(missing)


def test_out_of_order_sequence_is_retried_only_behind_a_batch_waiting_to_be_sent_again() -> None:
    out_of_order = kafka_errors.OutOfOrderSequenceNumberError()
    part = _part()
    assert not pr.Requests._retriable(out_of_order, part)  # alone: records were lost
    part.to_retry.append(QueuedBatch("x", 0, b"", 1, 1, 0, 0.0))
    assert pr.Requests._retriable(out_of_order, part)
    assert pr.Requests._retriable(kafka_errors.NotLeaderForPartitionError(), _part())
    assert pr.Requests._retriable(kafka_errors.RequestTimedOutError(), _part())
    assert not pr.Requests._retriable(kafka_errors.ProducerFencedError(), _part())
    assert not pr.Requests._retriable(kafka_errors.MessageSizeTooLargeError(), _part())


def test_lost_brokers_and_moved_leaders_are_retried_as_the_java_producer_does() -> None:
    for error in (
        kafka_errors.UnknownBrokerIdError(3),  # kafka-python: the leader left the metadata
        kafka_errors.NetworkExceptionError(),
        kafka_errors.KafkaStorageError(),
        kafka_errors.NotEnoughReplicasError(),
        kafka_errors.NotEnoughReplicasAfterAppendError(),
        kafka_errors.KafkaConnectionError("refused"),
    ):
        assert pr.Requests._retriable(error, _part()), error


def test_unknown_producer_id_is_retried_only_without_a_log_start_offset() -> None:
    unknown = kafka_errors.UnknownProducerIdError.errno
    moving = produce_error(_produce_answer(0, unknown), _part())
    assert isinstance(moving, kafka_errors.UnknownProducerIdError)
    assert pr.Requests._retriable(moving, _part())  # the partition was moving: ask again
    lost_state = produce_error(_produce_answer(0, unknown, log_start=50), _part())
    assert not pr.Requests._retriable(lost_state, _part())  # the transaction cannot go on


def test_add_partitions_reports_the_real_error_before_operation_not_attempted() -> None:
    result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
    topic = result.AddPartitionsToTxnTopicResult
    partition = topic.AddPartitionsToTxnPartitionResult
    not_attempted = kafka_errors.OperationNotAttemptedError.errno
    concurrent = kafka_errors.ConcurrentTransactionsError.errno

    def answer(*codes: int) -> AddPartitionsToTxnResponse:
        return AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                topic(
                    name="x",
                    results_by_partition=[
                        partition(partition_index=i, partition_error_code=c)
                        for i, c in enumerate(codes)
                    ],
                )
            ]
        )

    first_error = coordinator_requests.add_partitions_error_code
    assert first_error(answer(0, 0)) == 0
    assert first_error(answer(not_attempted, concurrent)) == concurrent
    assert first_error(answer(not_attempted)) == not_attempted
