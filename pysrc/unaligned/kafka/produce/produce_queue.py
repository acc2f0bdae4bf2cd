"""A produce session's batches and per-partition queues, and what a ``Produce`` answer means.

:mod:`unaligned.kafka.produce.produce_requests` sends; this module owns the data it sends and the
rules it reads answers by:

- :class:`QueuedBatch`: one encoded batch with its base sequence, deadline and, for error
  messages, where its records came from (:data:`RecordOrigin`);
- :class:`PartitionQueue`: a partition's batches queued, in flight and to retry;
- :func:`produce_error`: the answer to one batch (``None``: written, or written before);
- :func:`split_refused`: a batch the broker refused as too large, as two batches sent in its
  place (:mod:`unaligned.kafka.produce.batch_split`), and :func:`record_too_large` for a single
  record that does not fit even alone.

The sending rules are in :mod:`unaligned.kafka.produce.produce_requests`; ARCHITECTURE.md ("The
two-phase commit") has the protocol.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import kafka.errors as kafka_errors

from unaligned.errors import TransactionWriteError
from unaligned.kafka.produce.batch_split import split_batch
from unaligned.kafka.transactions.coordinator_requests import FIRST_BACKOFF_S

#: Answers that mean "this batch is too large for the topic": split it, or, alone, refuse it.
TOO_LARGE = (kafka_errors.MessageSizeTooLargeError, kafka_errors.RecordListTooLargeError)

RecordOrigin = Callable[[int], str]
"""Where record ``i`` of a chunk came from, in words (e.g. "input row 512 of the task")."""


@dataclass(frozen=True)
class QueuedBatch:
    """One encoded batch (producer fields set) and what it counts for. ``origin`` and
    ``first_record``: its first record is record ``first_record`` of ``origin``."""

    topic: str
    partition: int
    data: bytes
    record_count: int
    payload_bytes: int
    base_sequence: int
    deadline: float  # time.monotonic() after which it is not sent again
    origin: RecordOrigin | None = None
    first_record: int = 0


@dataclass
class PartitionQueue:
    """A partition's batches on the I/O thread: queued (to send, in sequence order), in flight,
    and failed retriably (sent again once nothing is in flight)."""

    topic: str
    partition: int
    leader: int | None = None
    added: bool = False
    queued: deque[QueuedBatch] = field(default_factory=deque)
    in_flight: list[QueuedBatch] = field(default_factory=list)
    to_retry: list[QueuedBatch] = field(default_factory=list)
    backoff_s: float = FIRST_BACKOFF_S
    failure: BaseException | None = None


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
            error: BaseException = error_type(message) if message else error_type()
            return error
    missing: BaseException = kafka_errors.KafkaError(
        f"the produce answer has no partition {part.partition}"
    )
    return missing


def split_refused(batch: QueuedBatch) -> tuple[QueuedBatch, QueuedBatch]:
    """The two batches sent instead of ``batch`` (refused as too large; two records or more):
    the same base sequence, record count and payload bytes between them."""
    first, second, half = split_batch(batch.data)
    share = batch.payload_bytes * len(first) // (len(first) + len(second))
    return (
        replace(batch, data=first, record_count=half, payload_bytes=share),
        replace(
            batch,
            data=second,
            record_count=batch.record_count - half,
            payload_bytes=batch.payload_bytes - share,
            base_sequence=-1 if batch.base_sequence < 0 else batch.base_sequence + half,
            first_record=batch.first_record + half,
        ),
    )


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
