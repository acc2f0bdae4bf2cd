"""The Kafka source's executor side: one Spark task reads its offset ranges into Arrow batches.

:class:`~unaligned.source.stream_reader.KafkaStreamReader` plans a :class:`KafkaInputPartition`
per task on the driver: one or more topic-partitions, each with its range
(:mod:`unaligned.source.read_tasks`). Spark pickles it to a Python worker, where
:func:`read_partition` runs on a fresh, unpickled reader, so everything the read needs is in the
input partition (a frozen dataclass of picklable values), never in the driver reader's state.

Offsets are "next offset to read" positions; a task reads exactly ``[start, end)`` of each of
its ranges, and yields each partition's records in offset order (partitions interleave). The
records come from ``Fetch`` requests (:mod:`unaligned.kafka.fetch.range_fetch`) on the worker
process's own kept connections for a plaintext cluster
(:mod:`unaligned.kafka.fetch.fetch_connections`), else on its kept admin client's, every partition's
byte bound sized from what is left of its range, and are decoded up to the range's end only
(:mod:`unaligned.kafka.records.record_decoder`). Records that are gone before the task reads them
(retention, delete-records, a recreated topic) are data loss: :func:`on_data_loss` applies
``failOnDataLoss`` (the driver's planning uses it too). See ARCHITECTURE.md, "The source's read
tasks".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from kafka.errors import OffsetOutOfRangeError
from pyspark.sql.datasource import InputPartition

from unaligned._process_memo import ProcessMemo
from unaligned._worker_memory import tune_worker_memory
from unaligned.errors import DataLossError, KafkaUnavailableError, LegacyRecordFormatError
from unaligned.kafka.clients.admin_clients import shared_admin_client
from unaligned.kafka.clients.client_internals import (
    connection_manager,
    read_sockets_in_large_pieces,
)
from unaligned.kafka.clients.client_options import KafkaClientConfig
from unaligned.kafka.clients.connections import OffsetLookup
from unaligned.kafka.fetch.fetch_connections import direct_connections
from unaligned.kafka.fetch.range_fetch import FetchAnswer, FetchWanted, RangeFetcher, fetch_settings
from unaligned.kafka.records.record_decoder import (
    DecodedFetch,
    decode_legacy_batches,
    decode_record_batches,
)
from unaligned.source.arrow_rows import to_arrow_batches
from unaligned.source.offset_ranges import OffsetRange

logger = logging.getLogger(__name__)

#: The first fetch of a partition whose record size this process has not seen yet.
PROBE_BYTES = 256 * 1024
#: Added to every byte bound: the batch that holds a range's last offset arrives whole.
SLACK_BYTES = 32 * 1024
#: Pause between two rounds that brought nothing (a leader moving, a broker restarting).
RETRY_PAUSE_S = 0.05

_BYTES_PER_OFFSET: ProcessMemo[str, float] = ProcessMemo()
"""Bytes per offset last seen per topic in this worker process: the first fetch of a later
task is sized from it instead of :data:`PROBE_BYTES`."""


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One read task: offsets ``[start, end)`` of each of ``ranges`` (distinct topic-partitions,
    or pieces of one partition with ``minPartitions``). ``index`` is the task's position in the
    batch; which topic-partitions a task index reads is stable while the partitions and the
    task count stay the same (:mod:`unaligned.source.read_tasks`)."""

    index: int
    ranges: tuple[OffsetRange, ...]
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


class _RangeState:
    """Where one range's read stands: the next offset to read and its progress clock."""

    def __init__(self, rng: OffsetRange, max_bytes: int) -> None:
        self.rng = rng
        self.next_offset = rng.start
        self.last_progress = time.monotonic()
        self.max_bytes = max_bytes
        self.grow = 1  # doubled while answers bring no complete batch

    @property
    def done(self) -> bool:
        return self.next_offset >= self.rng.end

    def wanted(self) -> FetchWanted:
        """The next fetch: what is left of the range at this topic's bytes per offset."""
        per_offset = _BYTES_PER_OFFSET.get(self.rng.tp.topic)
        left = self.rng.end - self.next_offset
        guess = PROBE_BYTES if per_offset is None else int(left * per_offset * 1.02) + SLACK_BYTES
        bound = min(self.max_bytes, guess * self.grow)
        return FetchWanted(self.rng.tp, self.next_offset, max(bound, 1))

    def advanced(self, decoded: DecodedFetch) -> None:
        if decoded.next_fetch_offset > self.next_offset:
            offsets = decoded.next_fetch_offset - self.next_offset
            _BYTES_PER_OFFSET.put(self.rng.tp.topic, decoded.bytes_read / offsets)
            self.next_offset = decoded.next_fetch_offset
            self.last_progress = time.monotonic()
            self.grow = 1
        else:  # a batch larger than the bound, cut off: ask for more next time
            self.grow = min(self.grow * 2, 1 << 16)


class _TaskRead:
    """One task's read: fetch rounds over its unfinished ranges until every one is done."""

    def __init__(self, part: KafkaInputPartition, fetcher: RangeFetcher) -> None:
        self.part = part
        self.fetcher = fetcher
        kwargs = part.kafka.consumer_kwargs()
        self.check_crcs = bool(kwargs.get("check_crcs", True))
        max_bytes = int(kwargs["max_partition_fetch_bytes"])
        self.states = [_RangeState(r, max_bytes) for r in part.ranges if r.size > 0]

    def batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            todo = [s for s in self.states if not s.done]
            if not todo:
                return
            # a range whose last answer was cut off goes first: the broker returns a first
            # batch larger than the bound only for the first partition of a request
            todo.sort(key=lambda s: -s.grow)
            by_tp = {s.rng.tp: s for s in todo}
            progressed = False
            for tp, answer in self.fetcher.answers([s.wanted() for s in todo]):
                state = by_tp[tp]
                before = state.next_offset
                yield from self._answer(state, answer)
                progressed |= state.next_offset > before
            if not progressed:
                time.sleep(RETRY_PAUSE_S)

    def _answer(self, state: _RangeState, answer: FetchAnswer) -> Iterator[pa.RecordBatch]:
        tp, rng = state.rng.tp, state.rng
        if answer.error is None:
            decoded = self._decode(state, answer)
            state.advanced(decoded)
            if decoded.columns is not None and len(decoded.columns):
                yield from to_arrow_batches(decoded.columns, tp, self.part.include_headers)
        elif not answer.retriable and not isinstance(answer.error, OffsetOutOfRangeError):
            raise KafkaUnavailableError(
                f"Kafka refused to read {tp} at offset {state.next_offset} "
                f"(range [{rng.start}, {rng.end})): {answer.error!r}"
            )
        elif isinstance(answer.error, OffsetOutOfRangeError):
            self._skip_lost(state)
            return
        if (
            state.done
            or (time.monotonic() - state.last_progress) * 1000 <= self.part.poll_timeout_ms
        ):
            return
        if not self._lost_below(state):
            raise KafkaUnavailableError(
                f"no records of {tp} at offsets [{state.next_offset}, {rng.end}) arrived from "
                f"Kafka at {self.part.kafka.bootstrap_servers} within "
                f"kafkaConsumer.pollTimeoutMs={self.part.poll_timeout_ms}"
                + ("" if answer.error is None else f" (last answer: {answer.error!r})")
            )
        self._skip_lost(state)

    def _decode(self, state: _RangeState, answer: FetchAnswer) -> DecodedFetch:
        headers, end = self.part.include_headers, state.rng.end
        try:
            return decode_record_batches(
                answer.records,
                state.rng.tp,
                state.next_offset,
                read_committed=self.part.kafka.read_committed,
                aborted_transactions=answer.aborted_transactions,
                check_crcs=self.check_crcs,
                include_headers=headers,
                end_offset=end,
            )
        except LegacyRecordFormatError:
            return decode_legacy_batches(
                answer.records, state.next_offset, include_headers=headers, end_offset=end
            )

    def _offsets(self) -> OffsetLookup:
        return OffsetLookup(self.part.kafka)

    def _lost_below(self, state: _RangeState) -> bool:
        lookup = self._offsets()
        try:
            return lookup.earliest([state.rng.tp])[state.rng.tp] > state.next_offset
        finally:
            lookup.close()

    def _skip_lost(self, state: _RangeState) -> None:
        """An out-of-range position: DataLossError, or (failOnDataLoss=false) go on past the
        gap."""
        tp, end, next_offset = state.rng.tp, state.rng.end, state.next_offset
        lookup = self._offsets()
        try:
            earliest = lookup.earliest([tp])[tp]
            latest = lookup.latest([tp])[tp] if earliest <= next_offset else -1
        finally:
            lookup.close()
        if earliest > next_offset:
            skip_to = min(earliest, end)
            message = (
                f"records of {tp} at offsets [{next_offset}, {skip_to}) are gone before the "
                "query read them (retention or deleted records)"
            )
        else:
            skip_to = end
            message = (
                f"offset {next_offset} of {tp} is outside the partition's offsets "
                f"[{earliest}, {latest}) (topic recreated?): records [{next_offset}, {end}) "
                "are lost"
            )
        on_data_loss(self.part.fail_on_data_loss, message)
        state.next_offset = skip_to
        state.last_progress = time.monotonic()


def read_partition(part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly offsets ``[start, end)`` of every range of ``part`` as Arrow batches.

    A range is done when the next offset to read reaches its end even if no record carries the
    last offsets (transaction markers and aborted records occupy offsets: SPARK-25005). Fails
    with :class:`KafkaUnavailableError` after ``kafkaConsumer.pollTimeoutMs`` without progress
    on a range.
    """
    if all(r.size == 0 for r in part.ranges):
        return
    tune_worker_memory()
    kwargs = part.kafka.consumer_kwargs()
    settings = fetch_settings(kwargs, part.kafka.read_committed)
    with shared_admin_client(kwargs) as admin:
        manager = connection_manager(admin)
        direct = direct_connections(kwargs, manager.broker_version)
        if direct is None:  # records come over kafka-python's connections
            read_sockets_in_large_pieces()
        fetcher = RangeFetcher(manager, settings, direct)
        yield from _TaskRead(part, fetcher).batches()
