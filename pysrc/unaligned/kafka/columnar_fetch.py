"""kafka-python integration: its consumer's ``poll()`` hands out columns, not records.

kafka-python decodes every record in Python (about 40,000 records/s per core).
:func:`install_columnar_fetch` swaps the consumer fetcher's ``PartitionRecords`` class for
:class:`ColumnarPartitionRecords`, which decodes each fetch response at once with
:func:`unaligned.kafka.record_decoder.decode_record_batches`; ``poll()`` then returns one
:class:`~unaligned.source.arrow_rows.RecordColumns` per fetch response. Message format v0/v1
batches still go through kafka-python's own ``PartitionRecords``.

This relies on private internals of kafka-python :data:`PINNED_KAFKA_PYTHON`
(``tests/kafka/test_columnar_fetch.py`` fails when they change). With another version the hook is
not installed and :func:`unaligned.source.arrow_rows.columns_from_consumer_records` converts
kafka-python's records instead.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import IsolationLevel

import kafka
from unaligned.errors import LegacyRecordFormatError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.record_columns import RecordColumns, columns_from_consumer_records
from unaligned.kafka.record_decoder import DecodedFetch, decode_record_batches

logger = logging.getLogger(__name__)

#: The kafka-python version whose fetcher internals :class:`ColumnarPartitionRecords` fits.
PINNED_KAFKA_PYTHON = "3.0.12"


class ColumnarPartitionRecords:
    """Stands in for kafka-python's ``Fetcher.PartitionRecords`` (pinned 3.0.12).

    The fetcher builds one of these per fetch response, reads ``next_fetch_offset``,
    ``leader_epoch``, ``topic_partition``, ``bytes_read``, truthiness, calls ``take(n)``
    (whose list it hands out from ``poll()``; afterwards the consumer's position becomes
    ``next_fetch_offset``) and ``drain()``. Here ``take`` returns at most one
    :class:`RecordColumns` for the whole response and drains, so ``poll()`` yields columns.
    """

    def __init__(
        self,
        fetch_offset: int,
        tp: Any,
        records: Any,
        key_deserializer: Any = None,
        value_deserializer: Any = None,
        check_crcs: bool = True,
        isolation_level: Any = IsolationLevel.READ_UNCOMMITTED,
        aborted_transactions: Any = None,
        metric_aggregator: Any = None,
        on_drain: Any = lambda _: None,
        *,
        include_headers: bool,
        fallback: Any,
    ) -> None:
        self.fetch_offset = fetch_offset
        self.topic_partition = tp
        self.metric_aggregator = metric_aggregator
        self.on_drain = on_drain
        self._open = True
        try:
            decoded = decode_record_batches(
                records._buffer,
                TopicPartitionId(tp.topic, tp.partition),
                fetch_offset,
                read_committed=isolation_level == IsolationLevel.READ_COMMITTED,
                aborted_transactions=aborted_transactions or (),
                check_crcs=check_crcs,
                include_headers=include_headers,
            )
        except LegacyRecordFormatError:
            legacy = fallback(
                fetch_offset,
                tp,
                records,
                key_deserializer=key_deserializer,
                value_deserializer=value_deserializer,
                check_crcs=check_crcs,
                isolation_level=isolation_level,
                aborted_transactions=aborted_transactions,
            )
            consumer_records = legacy.take()
            columns = (
                columns_from_consumer_records(consumer_records, include_headers)
                if consumer_records
                else None
            )
            decoded = DecodedFetch(
                columns, legacy.next_fetch_offset, legacy.leader_epoch, legacy.bytes_read
            )
        self._columns = decoded.columns
        # The fetcher only hands out records whose next_fetch_offset equals its position, so
        # this stays at fetch_offset until take() (as kafka-python's lazy iterator does).
        self.next_fetch_offset = fetch_offset
        self._next_after_take = decoded.next_fetch_offset
        self.leader_epoch = decoded.leader_epoch
        self.bytes_read = decoded.bytes_read
        self.records_read = 0 if decoded.columns is None else len(decoded.columns)

    def __bool__(self) -> bool:
        return self._open

    def take(self, n: int | None = None) -> list[RecordColumns]:
        columns, self._columns = self._columns, None
        self.next_fetch_offset = self._next_after_take
        self.drain()
        return [] if columns is None else [columns]

    def drain(self) -> None:
        if self._open:
            self._open = False
            self._columns = None
            if self.metric_aggregator:
                self.metric_aggregator.record(
                    self.topic_partition, self.bytes_read, self.records_read
                )
            self.on_drain(self)


def install_columnar_fetch(consumer: Any, include_headers: bool) -> bool:
    """Make ``consumer.poll()`` return :class:`RecordColumns` per fetch. False when this
    kafka-python is not the pinned version (then ``poll()`` returns ``ConsumerRecord``s)."""
    fetcher = getattr(consumer, "_fetcher", None)
    original = getattr(type(fetcher), "PartitionRecords", None)
    if kafka.__version__ != PINNED_KAFKA_PYTHON or fetcher is None or original is None:
        logger.warning(
            "kafka-python %s is not the pinned %s: reading through its per-record decoder (slow)",
            kafka.__version__,
            PINNED_KAFKA_PYTHON,
        )
        return False

    def factory(*args: Any, **kwargs: Any) -> ColumnarPartitionRecords:
        return ColumnarPartitionRecords(
            *args, include_headers=include_headers, fallback=original, **kwargs
        )

    fetcher.PartitionRecords = factory
    return True
