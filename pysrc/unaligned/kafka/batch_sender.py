"""Handing record batches encoded ahead of time to a kafka-python producer's own sender.

The sink's fast path encodes whole v2 record batches from Arrow columns
(:mod:`unaligned.kafka.record_encoder`); this module queues them in a ``KafkaProducer``'s record
accumulator, so everything after the encoding stays kafka-python's: metadata, connections, the
transaction manager (``AddPartitionsToTxn`` before a partition's first batch is sent), the
idempotent sequence numbers, ``acks``, retries, ``max.in.flight.requests.per.connection``,
delivery timeouts, ``flush`` and transaction aborts.

Guarantees of :func:`append_batch`:

- Per partition, batches are sent in the order they were appended, after any record
  ``KafkaProducer.send`` queued before them for that partition, and before any queued after.
- A batch's producer id, epoch, base sequence and transactional bit are written when the sender
  *drains* it (:meth:`PrebuiltRecords.set_producer_state`, called by the accumulator exactly as
  for its own batches), never before: a retried batch keeps the sequence it was first sent
  with, and a batch queued before an epoch bump is sent with the new epoch.
- ``on_done(acknowledged_records, failure)`` is called exactly once per appended batch, from the
  producer's I/O thread (or from ``abort_transaction``/``close``), with every record of the
  batch acknowledged (``failure`` ``None``) or with the first failure. A batch the broker
  refuses as too large is split by kafka-python; ``on_done`` then runs once all its parts are
  done.

Private kafka-python internals used (pinned to :data:`PINNED_KAFKA_PYTHON`, checked by
:func:`fast_path_unavailable` at run time and by ``tests/kafka/test_batch_sender.py``):
``KafkaProducer._accumulator`` (``_batches``, ``_tp_lock``, ``_incomplete``,
``_appends_in_progress``, ``_closed``, ``config['message_version']``),
``KafkaProducer._transaction_manager.maybe_add_partition_to_transaction``,
``KafkaProducer._sender.wakeup``, ``ProducerBatch`` (its ``records`` duck type: the methods of
:class:`PrebuiltRecords`, and ``_record_futures``, which the batch split rebinds).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

from kafka.errors import IllegalStateError
from kafka.producer.producer_batch import ProducerBatch
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c
from kafka.structs import TopicPartition

import kafka
from kafka import KafkaProducer
from unaligned.kafka.columnar_fetch import PINNED_KAFKA_PYTHON
from unaligned.kafka.record_batch_layout import TRANSACTIONAL

#: ``on_done(acknowledged_records, failure)``: ``failure`` is ``None`` when every record of the
#: batch was acknowledged.
BatchDone = Callable[[int, BaseException | None], None]

_ATTRIBUTES = struct.Struct(">h")
_PRODUCER_FIELDS = struct.Struct(">qhi")
_ATTRIBUTES_OFFSET = 21
_PRODUCER_OFFSET = 43
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_CRC_START = 21
_ACCUMULATOR_ATTRIBUTES = ("_batches", "_tp_lock", "_incomplete", "_appends_in_progress", "config")


class PrebuiltRecords:
    """One encoded v2 record batch in the shape of kafka-python's ``MemoryRecordsBuilder``.

    It is full from the start (``append`` refuses every record), so the accumulator never adds
    to it and sends it as it is; ``set_producer_state`` rewrites the producer fields and CRC of
    the header in place, once, before the batch is first sent.
    """

    __slots__ = ("_buffer", "_closed", "_count", "_producer_id", "_producer_epoch", "_sequence")

    def __init__(self, data: bytes, record_count: int) -> None:
        self._buffer = bytearray(data)
        self._count = record_count
        self._closed = False
        self._producer_id, self._producer_epoch, self._sequence = _PRODUCER_FIELDS.unpack_from(
            self._buffer, _PRODUCER_OFFSET
        )

    def append(self, timestamp: Any, key: Any, value: Any, headers: Any = None) -> None:
        """Refuse: a prebuilt batch takes no more records (``None``, as a full builder)."""
        return None

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
    ) -> None:
        if self._closed:
            raise IllegalStateError("the producer state of a sent batch cannot change")
        buf = self._buffer
        attributes = _ATTRIBUTES.unpack_from(buf, _ATTRIBUTES_OFFSET)[0] & ~TRANSACTIONAL
        if is_transactional:
            attributes |= TRANSACTIONAL
        _ATTRIBUTES.pack_into(buf, _ATTRIBUTES_OFFSET, attributes)
        fields = (producer_id, producer_epoch, base_sequence)
        _PRODUCER_FIELDS.pack_into(buf, _PRODUCER_OFFSET, *fields)
        _CRC.pack_into(buf, _CRC_OFFSET, calc_crc32c(memoryview(buf)[_CRC_START:]))
        self._producer_id, self._producer_epoch = producer_id, producer_epoch
        self._sequence = base_sequence

    @property
    def producer_id(self) -> int:
        return int(self._producer_id)

    @property
    def producer_epoch(self) -> int:
        return int(self._producer_epoch)

    @property
    def base_sequence(self) -> int:
        return int(self._sequence)

    def close(self) -> None:
        self._closed = True

    def records(self) -> MemoryRecords:
        return MemoryRecords(bytes(self._buffer))

    def buffer(self) -> bytearray:
        return self._buffer

    def size_in_bytes(self) -> int:
        return len(self._buffer)

    def compression_rate(self) -> float:
        return 1.0

    def is_full(self) -> bool:
        return True

    def next_offset(self) -> int:
        return self._count


class _BatchOutcome:
    """Calls ``on_done`` once, for a batch or for all the parts kafka-python split it into."""

    def __init__(self, record_count: int, on_done: BatchDone) -> None:
        self._lock = threading.Lock()
        self._left = record_count
        self._acknowledged = 0
        self._failure: BaseException | None = None
        self._on_done = on_done

    def batch_done(self, result: object) -> None:
        """Callback of the whole batch's produce future: ``(offset, time, record_errors)``."""
        failure = _failure_of(result, 0)
        with self._lock:
            left, self._left = self._left, 0
        if left:
            self._on_done(0 if failure is not None else left, failure)

    def record_done(self, index: int, result: object) -> None:
        """Callback of one record after a split (the record is ``index`` of its new batch)."""
        failure = _failure_of(result, index)
        with self._lock:
            if not self._left:
                return
            self._left -= 1
            if failure is None:
                self._acknowledged += 1
            elif self._failure is None:
                self._failure = failure
            finished = not self._left
        if finished:
            self._on_done(self._acknowledged, self._failure)


def _failure_of(result: object, index: int) -> BaseException | None:
    if isinstance(result, BaseException):
        return result
    if isinstance(result, tuple) and len(result) == 3:
        record_errors = result[2]
        if record_errors is not None:
            error = record_errors(index)
            return error if isinstance(error, BaseException) else IllegalStateError(str(error))
    return None


class _RecordSlot:
    """What kafka-python's batch split rebinds in place of a record's future."""

    __slots__ = ("_outcome",)

    def __init__(self, outcome: _BatchOutcome) -> None:
        self._outcome = outcome

    def rebind(self, produce_future: Any, batch_index: int) -> None:
        outcome = self._outcome
        produce_future.add_callback(outcome.record_done, batch_index)
        produce_future.add_errback(outcome.record_done, batch_index)


class _RecordSlots:
    """The ``_record_futures`` of a prebuilt batch: one slot per record, made on demand (only a
    split of the batch reads them)."""

    def __init__(self, record_count: int, outcome: _BatchOutcome) -> None:
        self._count = record_count
        self._outcome = outcome

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> _RecordSlot:
        if not 0 <= index < self._count:
            raise IndexError(index)
        return _RecordSlot(self._outcome)

    def append(self, future: object) -> None:
        raise IllegalStateError("a prebuilt batch takes no more records")


def fast_path_unavailable(producer: KafkaProducer) -> str | None:
    """Why :func:`append_batch` cannot be used with ``producer`` (``None``: it can).

    Checked once the producer's transactions are initialised (the record format is known then).
    """
    if kafka.__version__ != PINNED_KAFKA_PYTHON:
        return f"kafka-python is {kafka.__version__}, the fast path fits {PINNED_KAFKA_PYTHON} only"
    accumulator = getattr(producer, "_accumulator", None)
    manager = getattr(producer, "_transaction_manager", None)
    sender = getattr(producer, "_sender", None)
    if accumulator is None or any(not hasattr(accumulator, a) for a in _ACCUMULATOR_ATTRIBUTES):
        return "the producer's record accumulator does not have the expected internals"
    if manager is None or not hasattr(manager, "maybe_add_partition_to_transaction"):
        return "the producer has no transaction manager"
    if sender is None or not hasattr(sender, "wakeup"):
        return "the producer has no sender thread"
    if accumulator.config.get("message_version") != 2:
        return "the brokers do not take v2 record batches"
    return None


def append_batch(
    producer: KafkaProducer,
    tp: TopicPartition,
    data: bytes,
    record_count: int,
    on_done: BatchDone,
    *,
    wake_sender: bool = True,
) -> None:
    """Queue one encoded v2 record batch of ``record_count`` records for ``tp`` in ``producer``'s
    current transaction (see the module docstring for the guarantees).

    Raises ``kafka.errors.KafkaError`` when the transaction cannot take records (an earlier
    failure, no transaction open) and ``IllegalStateError`` when the producer is closed.
    ``wake_sender=False`` leaves waking the I/O thread to the caller (:func:`wake`, once after
    many batches: each wake-up is a system call).
    """
    manager = producer._transaction_manager
    manager.maybe_add_partition_to_transaction(tp)
    accumulator = producer._accumulator
    batch = ProducerBatch(tp, PrebuiltRecords(data, record_count))
    outcome = _BatchOutcome(record_count, on_done)
    batch._record_futures = _RecordSlots(record_count, outcome)
    batch.produce_future.add_callback(outcome.batch_done)
    batch.produce_future.add_errback(outcome.batch_done)
    accumulator._appends_in_progress.increment()
    try:
        with accumulator._tp_lock(tp):
            if accumulator._closed:
                raise IllegalStateError("the producer's record accumulator is closed")
            accumulator._batches[tp].append(batch)
            accumulator._incomplete.add(batch)
    finally:
        accumulator._appends_in_progress.decrement()
    if wake_sender:
        wake(producer)


def wake(producer: KafkaProducer) -> None:
    """Wake ``producer``'s I/O thread so that it sends the batches queued so far."""
    producer._sender.wakeup()
