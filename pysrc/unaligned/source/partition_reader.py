"""The Kafka source's executor side: one Spark task reads one offset range into Arrow batches.

:class:`~unaligned.source.stream_reader.KafkaStreamReader` plans a :class:`KafkaInputPartition` per
task on the driver; Spark pickles it (and the reader) to a Python worker, where
:func:`read_partition` runs on a fresh, unpickled reader. Everything the read needs is therefore
in the input partition (a frozen dataclass of picklable values), never in the driver reader's
state: the read opens its own consumer from the partition's :class:`KafkaClientConfig`.

Offsets are "next offset to read" positions; a task reads exactly ``[start, end)``. Records that
are gone before the task reads them (retention, delete-records, a recreated topic) are data loss:
:func:`on_data_loss` applies ``failOnDataLoss`` (the driver's planning uses it too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors
from unaligned._worker_memory import tune_worker_memory
from unaligned.errors import DataLossError, KafkaUnavailableError
from unaligned.kafka.client_options import KafkaClientConfig
from unaligned.kafka.columnar_fetch import install_columnar_fetch
from unaligned.kafka.connections import open_consumer
from unaligned.kafka.record_columns import RecordColumns, columns_from_consumer_records
from unaligned.source.arrow_rows import MAX_BATCH_ROWS, to_arrow_batches
from unaligned.source.offset_ranges import OffsetRange

logger = logging.getLogger(__name__)

#: How long one ``poll()`` blocks; progress is checked between polls.
POLL_SLICE_MS = 200


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One read task: offsets ``[range.start, range.end)`` of one topic-partition.

    ``index`` is the task's position in the batch; without ``minPartitions`` /
    ``maxRecordsPerPartition`` splitting, task ``i`` reads the ``i``-th topic-partition in
    (topic, partition) order every batch.
    """

    index: int
    range: OffsetRange
    kafka: KafkaClientConfig
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int


def on_data_loss(fail_on_data_loss: bool, message: str) -> None:
    """``failOnDataLoss``: raise :class:`DataLossError` with ``message`` (naming the
    topic-partition and offsets), or log it as a warning and let the caller go on."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Set the option failOnDataLoss=false to continue with the records left."
        )
    logger.warning(
        "%s (failOnDataLoss=false: continuing with the records still available)", message
    )


class _RangeReader:
    """Reads offsets ``[start, end)`` of one partition with one consumer (see read_partition)."""

    def __init__(self, part: KafkaInputPartition, consumer: KafkaConsumer) -> None:
        self.part = part
        self.tp = part.range.tp
        self.consumer = consumer
        self.ktp = KafkaTopicPartition(self.tp.topic, self.tp.partition)
        self.timeout_ms = part.kafka.request_timeout_ms
        self.columnar = install_columnar_fetch(consumer, part.include_headers)
        consumer.assign([self.ktp])
        consumer.seek(self.ktp, part.range.start)

    def poll(self) -> list[RecordColumns]:
        """The records of one poll (possibly none), as columns."""
        polled = self.consumer.poll(
            timeout_ms=POLL_SLICE_MS, max_records=1 if self.columnar else MAX_BATCH_ROWS
        )
        items = polled.get(self.ktp, [])
        if self.columnar or not items:
            return list(items)
        return [columns_from_consumer_records(items, self.part.include_headers)]

    def position(self) -> int:
        return int(self.consumer.position(self.ktp, timeout_ms=self.timeout_ms))

    def skip_lost(self, next_offset: int) -> int:
        """An out-of-range position: DataLossError, or (failOnDataLoss=false) seek past the gap.
        Returns the new next offset to read."""
        end = self.part.range.end
        earliest = self.consumer.beginning_offsets([self.ktp], timeout_ms=self.timeout_ms)[self.ktp]
        if earliest > next_offset:
            skip_to: int = min(earliest, end)
            message = (
                f"records of {self.tp} at offsets [{next_offset}, {skip_to}) are gone before the "
                "query read them (retention or deleted records)"
            )
        else:
            latest = self.consumer.end_offsets([self.ktp], timeout_ms=self.timeout_ms)[self.ktp]
            skip_to = end
            message = (
                f"offset {next_offset} of {self.tp} is outside the partition's offsets "
                f"[{earliest}, {latest}) (topic recreated?): records [{next_offset}, {end}) "
                "are lost"
            )
        on_data_loss(self.part.fail_on_data_loss, message)
        if skip_to < end:
            self.consumer.seek(self.ktp, skip_to)
        return skip_to

    def lost_below(self, next_offset: int) -> bool:
        earliest = self.consumer.beginning_offsets([self.ktp], timeout_ms=self.timeout_ms)[self.ktp]
        return bool(earliest > next_offset)


def read_partition(part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly offsets ``[start, end)`` of one partition as Arrow batches.

    Stops when the consumer's position reaches ``end`` even if no record carries the last
    offsets (transaction markers and aborted records occupy offsets: SPARK-25005). Fails with
    KafkaUnavailableError after ``kafkaConsumer.pollTimeoutMs`` without progress.
    """
    rng, tp = part.range, part.range.tp
    if rng.size == 0:
        return
    tune_worker_memory()
    consumer = open_consumer(part.kafka)
    try:
        reader = _RangeReader(part, consumer)
        next_offset = rng.start
        last_progress = time.monotonic()
        while next_offset < rng.end:
            before = next_offset
            try:
                for columns in reader.poll():
                    columns = columns.before(rng.end)
                    if len(columns):
                        yield from to_arrow_batches(columns, tp, part.include_headers)
                        next_offset = int(columns.offsets[-1]) + 1
            except kafka_errors.OffsetOutOfRangeError:
                next_offset = reader.skip_lost(next_offset)
            # The position moves past transaction markers and aborted records as well.
            next_offset = max(next_offset, reader.position())
            now = time.monotonic()
            if next_offset > before:
                last_progress = now
            elif (now - last_progress) * 1000 > part.poll_timeout_ms:
                if not reader.lost_below(next_offset):
                    raise KafkaUnavailableError(
                        f"no records of {tp} at offsets [{next_offset}, {rng.end}) arrived from "
                        f"Kafka at {part.kafka.bootstrap_servers} within "
                        f"kafkaConsumer.pollTimeoutMs={part.poll_timeout_ms}"
                    )
                next_offset = reader.skip_lost(next_offset)
                last_progress = now
    except kafka_errors.KafkaTimeoutError as exc:
        raise KafkaUnavailableError(
            f"Kafka at {part.kafka.bootstrap_servers} did not answer while reading {tp} "
            f"[{rng.start}, {rng.end}): {exc!r}"
        ) from exc
    finally:
        consumer.close(autocommit=False, timeout_ms=1000)
