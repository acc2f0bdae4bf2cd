"""What a broker's Produce answer means (unaligned.kafka.produce.produce_answers): no broker.
Against a real broker (a broker stopped mid-write, refusals, splits):
integration/test_produce_session.py."""

from __future__ import annotations

import kafka.errors as kafka_errors
from kafka.protocol.producer import ProduceResponse

from unaligned.errors import TransactionWriteError
from unaligned.kafka.produce.produce_answers import can_retry, final_error, produce_error
from unaligned.kafka.produce.produce_queue import PartitionQueue, QueuedBatch


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
    assert not can_retry(out_of_order, part)  # alone: records were lost
    part.to_retry.append(QueuedBatch("x", 0, b"", 1, 1, 0, 0.0))
    assert can_retry(out_of_order, part)
    assert can_retry(kafka_errors.NotLeaderForPartitionError(), _part())
    assert can_retry(kafka_errors.RequestTimedOutError(), _part())
    assert not can_retry(kafka_errors.ProducerFencedError(), _part())
    assert not can_retry(kafka_errors.MessageSizeTooLargeError(), _part())


def test_lost_brokers_and_moved_leaders_are_retried_as_the_java_producer_does() -> None:
    for error in (
        kafka_errors.UnknownBrokerIdError(3),  # kafka-python: the leader left the metadata
        kafka_errors.NetworkExceptionError(),
        kafka_errors.KafkaStorageError(),
        kafka_errors.NotEnoughReplicasError(),
        kafka_errors.NotEnoughReplicasAfterAppendError(),
        kafka_errors.KafkaConnectionError("refused"),
    ):
        assert can_retry(error, _part()), error


def test_unknown_producer_id_is_retried_only_without_a_log_start_offset() -> None:
    unknown = kafka_errors.UnknownProducerIdError.errno
    moving = produce_error(_produce_answer(0, unknown), _part())
    assert isinstance(moving, kafka_errors.UnknownProducerIdError)
    assert can_retry(moving, _part())  # the partition was moving: ask again
    lost_state = produce_error(_produce_answer(0, unknown, log_start=50), _part())
    assert not can_retry(lost_state, _part())  # the transaction cannot go on


def test_a_batch_not_sent_again_fails_with_what_its_error_means() -> None:
    batch = QueuedBatch("x", 0, b"\x00" * 40, 1, 1, 0, 0.0)
    too_large = final_error(kafka_errors.MessageSizeTooLargeError(), batch, "transaction 't'")
    assert isinstance(too_large, TransactionWriteError) and "max.message.bytes" in str(too_large)
    late = final_error(kafka_errors.NotLeaderForPartitionError(), batch, "transaction 't'")
    assert isinstance(late, kafka_errors.KafkaTimeoutError)
    assert "delivery.timeout.ms" in str(late)
    fenced = kafka_errors.ProducerFencedError()
    assert final_error(fenced, batch, "transaction 't'") is fenced
