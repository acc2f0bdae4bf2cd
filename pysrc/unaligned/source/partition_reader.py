"""The Kafka source's executor side: one Spark task reads its offset ranges into Arrow batches.

:class:`~unaligned.source.stream_reader.KafkaStreamReader` plans a :class:`KafkaInputPartition`
per task on the driver: one or more topic-partitions, each with its range
(:mod:`unaligned.source.planning.offset_ranges`). Spark pickles it to a Python worker, where
:func:`read_partition` runs on a fresh, unpickled reader, so everything the read needs is in the
input partition (a frozen dataclass of picklable values), never in the driver reader's state.

Offsets are "next offset to read" positions; a task reads exactly ``[start, end)`` of each of
its ranges, and yields each partition's records in offset order (partitions interleave). The
records come from ``Fetch`` requests (:mod:`unaligned.kafka.fetch.range_fetch`) on the worker
process's own kept connections for a plaintext cluster
(:mod:`unaligned.kafka.fetch.fetch_connections`), else on its kept admin client's, every partition's
byte bound sized from what is left of its range, and are decoded up to the range's end only
(:mod:`unaligned.kafka.records.record_decoder`): every partition's answer of a fetch round is
walked as it arrives and the round's records are decoded together and yielded as one set of
Arrow batches, partition after partition (at most :data:`DECODE_BYTES` of records at a time),
so a task over 1,000 partitions pays the decoding's numpy passes and Spark's per-batch cost
once a round, not once per partition. Retriable answers (a leader moved, a broker
lost) are asked again after a pause that doubles up to 1 s, until ``kafkaConsumer.pollTimeoutMs``
passes without progress. Records that are gone before the task reads them (retention,
delete-records, a log truncated under it) are data loss only on the leader's word
(:mod:`unaligned.source.lost_records`, which applies ``failOnDataLoss``). See ARCHITECTURE.md,
"The source's read tasks".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from kafka.errors import OffsetOutOfRangeError
from pyspark.sql.datasource import InputPartition

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import KafkaUnavailableError, LegacyRecordFormatError
from unaligned.kafka.clients.admin_clients import shared_admin_client
from unaligned.kafka.clients.client_internals import (
    connection_manager,
    read_sockets_in_large_pieces,
)
from unaligned.kafka.clients.client_options import KafkaClientConfig
from unaligned.kafka.clients.retries import Backoff
from unaligned.kafka.fetch.fetch_answers import FetchAnswer, FetchWanted, fetch_settings
from unaligned.kafka.fetch.fetch_connections import direct_connections
from unaligned.kafka.fetch.range_fetch import RangeFetcher
from unaligned.kafka.records.record_decoder import (
    DecodedFetch,
    FetchDecoder,
    ScannedFetch,
    decode_legacy_batches,
)
from unaligned.source.arrow_rows import to_arrow_batches
from unaligned.source.lost_records import PositionCheck
from unaligned.source.planning.offset_ranges import OffsetRange
from unaligned.tuning.worker_memory import tune_worker_memory

logger = logging.getLogger(__name__)

#: The first fetch of a partition whose record size this process has not seen yet.
PROBE_BYTES = 256 * 1024
#: Added to every byte bound: the batch that holds a range's last offset arrives whole.
SLACK_BYTES = 32 * 1024
#: Records of this many bytes taken from answers are decoded together, before the round ends.
DECODE_BYTES = 16 * 1024 * 1024
#: The first pause after a round that brought nothing (a leader moving, a broker restarting);
#: it doubles up to 1 s while nothing comes.
RETRY_PAUSE_S = 0.05

_BYTES_PER_OFFSET: ProcessMemo[str, float] = ProcessMemo()
"""Bytes per offset last seen per topic in this worker process: the first fetch of a later
task is sized from it instead of :data:`PROBE_BYTES`."""


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One read task: offsets ``[start, end)`` of each of ``ranges`` (distinct topic-partitions,
    or pieces of one partition with ``minPartitions``). ``index`` is the task's position in the
    batch; which topic-partitions a task index reads is stable while the partitions and the
    task count stay the same (:mod:`unaligned.source.planning.offset_ranges`)."""

    index: int
    ranges: tuple[OffsetRange, ...]
    kafka: KafkaClientConfig
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    schema_id_headers: bool = False
    """Read the headers for a Schema Registry format's schema id headers, even without
    ``include_headers`` (the decoding drops the column then)."""

    @property
    def reads_headers(self) -> bool:
        return self.include_headers or self.schema_id_headers


class _RangeState:
    """Where one range's read stands: the next offset to read and its progress clock."""

    def __init__(self, rng: OffsetRange, max_bytes: int) -> None:
        self.rng = rng
        self.next_offset = rng.start
        self.last_progress = time.monotonic()
        self.max_bytes = max_bytes
        self.grow = 1  # doubled while answers bring no complete batch
        self.fetch_epoch = -1
        """Leader epoch of the requests whose records were read (-1: none yet)."""
        self.batch_epoch = -1
        """Leader epoch written in the last record batch read (its ``partitionLeaderEpoch``)."""

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

    def advanced(self, decoded: DecodedFetch | ScannedFetch) -> None:
        if decoded.leader_epoch >= 0:
            self.batch_epoch = decoded.leader_epoch
        if decoded.next_fetch_offset > self.next_offset:
            offsets = decoded.next_fetch_offset - self.next_offset
            _BYTES_PER_OFFSET.put(self.rng.tp.topic, decoded.bytes_read / offsets)
            self.next_offset = decoded.next_fetch_offset
            self.last_progress = time.monotonic()
            self.grow = 1
        else:  # a batch larger than the bound, cut off: ask for more next time
            self.grow = min(self.grow * 2, 1 << 16)

    def skipped_to(self, offset: int) -> None:
        """Go on from ``offset`` past records that are lost (``failOnDataLoss=false``)."""
        self.next_offset = offset
        self.last_progress = time.monotonic()


class _TaskRead:
    """One task's read: fetch rounds over its unfinished ranges until every one is done."""

    def __init__(self, part: KafkaInputPartition, fetcher: RangeFetcher) -> None:
        self.part = part
        self.fetcher = fetcher
        kwargs = part.kafka.consumer_kwargs()
        max_bytes = int(kwargs["max_partition_fetch_bytes"])
        self.states = [_RangeState(r, max_bytes) for r in part.ranges if r.size > 0]
        self.checks = PositionCheck(part.kafka, fetcher, part.fail_on_data_loss)
        self.idle = Backoff(first_s=RETRY_PAUSE_S)
        self.decoder = FetchDecoder(
            read_committed=part.kafka.read_committed,
            check_crcs=bool(kwargs.get("check_crcs", True)),
            include_headers=part.reads_headers,
        )

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
                if self.decoder.pending_bytes >= DECODE_BYTES:
                    yield from self._decoded()
            yield from self._decoded()
            if progressed:
                self.idle.reset()
            else:  # a leader moving, a broker restarting: wait longer each round, up to 1 s
                time.sleep(self.idle.next())

    def _decoded(self) -> Iterator[pa.RecordBatch]:
        """The records of the answers taken since the last call, every partition's in one set
        of Arrow batches (partition after partition, each in offset order)."""
        decoded = self.decoder.decode()
        if decoded is not None:
            yield from to_arrow_batches(
                decoded.columns, decoded.partitions, self.part.reads_headers
            )

    def _answer(self, state: _RangeState, answer: FetchAnswer) -> Iterator[pa.RecordBatch]:
        """Take one partition's answer: its records go to the decoder (a legacy-format answer
        is decoded and yielded at once, after what the decoder holds), its range moves on."""
        tp, rng = state.rng.tp, state.rng
        if answer.error is None and self._same_log(state, answer):
            try:
                state.advanced(self._scan(state, answer))
            except LegacyRecordFormatError:
                yield from self._decoded()
                legacy = decode_legacy_batches(
                    answer.records,
                    state.next_offset,
                    include_headers=self.part.reads_headers,
                    end_offset=rng.end,
                )
                state.advanced(legacy)
                if legacy.columns is not None:
                    yield from to_arrow_batches(
                        legacy.columns, [(tp, len(legacy.columns))], self.part.reads_headers
                    )
        elif answer.error is None:
            pass  # the truncation check had no answer yet: read again
        elif isinstance(answer.error, OffsetOutOfRangeError) and not answer.retriable:
            skip_to = self.checks.out_of_range(tp, state.next_offset, rng.end, self._stalled(state))
            if skip_to is not None:
                state.skipped_to(skip_to)
            return
        elif not answer.retriable:
            raise KafkaUnavailableError(
                f"Kafka refused to read {tp} at offset {state.next_offset} "
                f"(range [{rng.start}, {rng.end})): {answer.error!r}"
            )
        if state.done or not self._stalled(state):
            return
        skip_to = self.checks.gone_below(tp, state.next_offset, rng.end)
        if skip_to is None:
            raise KafkaUnavailableError(
                f"no records of {tp} at offsets [{state.next_offset}, {rng.end}) arrived from "
                f"Kafka at {self.part.kafka.bootstrap_servers} within "
                f"kafkaConsumer.pollTimeoutMs={self.part.poll_timeout_ms}"
                + ("" if answer.error is None else f" (last answer: {answer.error!r})")
            )
        state.skipped_to(skip_to)

    def _stalled(self, state: _RangeState) -> bool:
        """No progress on the range for ``kafkaConsumer.pollTimeoutMs``."""
        return (time.monotonic() - state.last_progress) * 1000 > self.part.poll_timeout_ms

    def _same_log(self, state: _RangeState, answer: FetchAnswer) -> bool:
        """Whether the answer's records follow what the range read so far: after a leader
        change, the truncation check (:meth:`PositionCheck.truncated`) must have passed."""
        newer = answer.leader_epoch > state.fetch_epoch >= 0 and state.batch_epoch >= 0
        if newer:
            truncated = self.checks.truncated(state.rng.tp, state.batch_epoch, state.next_offset)
            if truncated is None:
                return False
        state.fetch_epoch = max(state.fetch_epoch, answer.leader_epoch)
        return True

    def _scan(self, state: _RangeState, answer: FetchAnswer) -> ScannedFetch:
        return self.decoder.add(
            answer.records,
            state.rng.tp,
            state.next_offset,
            aborted_transactions=answer.aborted_transactions,
            end_offset=state.rng.end,
        )


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
