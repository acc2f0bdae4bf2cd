"""What a broker's ``Produce`` answer to one batch means, for
:mod:`unaligned.kafka.produce.produce_requests`.

- :func:`produce_error`: the answer to one batch (``None``: written, or written before:
  ``DUPLICATE_SEQUENCE_NUMBER``); ``UNKNOWN_PRODUCER_ID`` keeps the log start offset of the same
  answer (:class:`UnknownProducerIdAnswer`), a refused Topic Write is a
  :class:`~unaligned.kafka.clients.authorization.RequestRefused` naming the topic;
- :func:`can_retry`: whether the batch goes out again with the same sequence, as Kafka's
  ``TransactionManager.canRetry`` for a transactional producer;
- :data:`TOO_LARGE`: the refusals that split a batch in two (the split is
  :func:`unaligned.kafka.produce.produce_queue.split_refused`);
- :func:`final_error`: the error a batch fails with when it is not sent again (a single record
  too large for its topic, or ``delivery.timeout.ms`` passed behind retriable errors).
"""

from __future__ import annotations

from typing import Any

import kafka.errors as kafka_errors

from unaligned.errors import TransactionWriteError
from unaligned.kafka.clients.authorization import TOPIC, RequestRefused, Resource
from unaligned.kafka.clients.retries import is_retriable
from unaligned.kafka.produce.produce_queue import PartitionQueue, QueuedBatch

#: Answers that mean "this batch is too large for the topic": split it, or, alone, refuse it.
TOO_LARGE = (kafka_errors.MessageSizeTooLargeError, kafka_errors.RecordListTooLargeError)


class UnknownProducerIdAnswer(kafka_errors.UnknownProducerIdError):  # type: ignore[misc]
    """``UNKNOWN_PRODUCER_ID`` with the partition's log start offset from the same answer (-1:
    the broker did not know it)."""

    def __init__(self, message: str, log_start_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset


def produce_error(result: Any, part: PartitionQueue) -> BaseException | None:
    """The answer to one batch's request: ``None`` if the broker wrote it (or had already)."""
    if isinstance(result, BaseException):
        return result
    for topic in result.responses:
        for answer in topic.partition_responses:
            if answer.index != part.partition:
                continue
            error_type: type[BaseException] = kafka_errors.for_code(answer.error_code)
            if error_type in (kafka_errors.NoError, kafka_errors.DuplicateSequenceNumberError):
                return None
            message = getattr(answer, "error_message", None)
            if error_type is kafka_errors.UnknownProducerIdError:
                log_start = getattr(answer, "log_start_offset", None)
                return UnknownProducerIdAnswer(
                    message or f"{part.topic}-{part.partition}",
                    -1 if log_start is None else int(log_start),
                )
            if error_type is kafka_errors.TopicAuthorizationFailedError:
                return RequestRefused("Produce", Resource(TOPIC, part.topic), ["Write"])
            error: BaseException = error_type(message) if message else error_type()
            return error
    missing: BaseException = kafka_errors.KafkaError(
        f"the produce answer has no partition {part.partition}"
    )
    return missing


def can_retry(error: BaseException, part: PartitionQueue) -> bool:
    """As Kafka's ``TransactionManager.canRetry`` for a transactional producer."""
    if isinstance(error, kafka_errors.OutOfOrderSequenceNumberError):
        return bool(part.to_retry)  # behind a batch that failed retriably
    if isinstance(error, UnknownProducerIdAnswer):
        # The broker lost this producer's state on the partition. Without a log start
        # offset in the answer (the partition was moving) ask again, as Java does; with
        # one, the transaction cannot go on (Java makes it abortable): the task fails and
        # its retry writes the rows again in a new transaction.
        return error.log_start_offset < 0
    return is_retriable(error)


def record_too_large(
    batch: QueuedBatch, error: BaseException, session: str
) -> TransactionWriteError:
    """The failure of a one-record batch the broker refused as too large (``session``: the
    session in words, ``transaction 'id'``)."""
    origin = "" if batch.origin is None else f" ({batch.origin(batch.first_record)})"
    return TransactionWriteError(
        f"{session}: a record is too large for topic {batch.topic!r} (partition "
        f"{batch.partition}): the broker refused its {len(batch.data)}-byte record batch even "
        f"with that record alone{origin}: {error!r}. The topic's max.message.bytes was lowered "
        "below it (or is below it): raise the topic's max.message.bytes (and "
        "kafka.max.request.size if needed), or write smaller records"
    )


def final_error(error: BaseException, batch: QueuedBatch, session: str) -> BaseException:
    """What ``batch`` fails with when it is not sent again: a refusal as too large names the
    record (:func:`record_too_large`); a retriable error means ``delivery.timeout.ms`` passed."""
    if isinstance(error, TOO_LARGE):
        return record_too_large(batch, error, session)
    if isinstance(error, kafka_errors.RetriableError):
        timed_out: BaseException = kafka_errors.KafkaTimeoutError(
            f"batch of {batch.record_count} record(s) not acknowledged within "
            f"delivery.timeout.ms; last error {error!r}"
        )
        return timed_out
    return error
