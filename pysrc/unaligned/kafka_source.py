"""``spark.readStream.format("unaligned")``: the Kafka stream reader (a drop-in for Spark's).

Driver side (one :class:`KafkaStreamReader` per query run, kept across batches): it discovers
partitions, resolves the starting position, computes each batch's end offsets under the read
limits, and plans one task per topic-partition. Executor side: :func:`read_partition` runs on a
fresh, unpickled reader per task and uses only what the :class:`KafkaInputPartition` carries.

Offsets are "next offset to read" positions; ranges are ``[start, end)``; the checkpointed
offset is :class:`~unaligned.offsets.SourceOffset` JSON, with room for an ``idleBarrier`` counter.

Per batch Spark calls ``latestOffset(start, limit)`` -> ``commit(previous end)`` ->
``partitions(start, end)``; after a restart it replays the last planned batch with
``partitions(start, end)`` straight from its offset log. Planning therefore never depends on
state set by ``latestOffset``.

Data loss (``failOnDataLoss``, default true): records below a partition's log start offset
(retention, delete-records), a partition or topic that disappeared, an offset that went
backwards (topic recreated), or a new partition not starting at 0 stop the query with a
:class:`~unaligned.errors.DataLossError` naming the topic-partition and offsets; with
``failOnDataLoss=false`` the source logs a warning and reads what is still there.

Known limit: Spark's own Kafka source stores the initial offsets of a new query in its
checkpoint; a Python source sees no checkpoint location, so if the very first batch fails before
it is committed, ``startingOffsets=latest`` (or a timestamp) is resolved again on restart.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Collection, Iterator, Mapping

import pyarrow as pa
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from unaligned.errors import DataLossError, KafkaUnavailableError, OptionError, TopicNotFoundError
from unaligned.kafka_client import KafkaClientConfig, OffsetLookup, open_consumer
from unaligned.offsets import (
    Boundary,
    OffsetRange,
    SourceOffset,
    TopicPartition,
    available_records,
    format_partitions,
    min_rows_delay_passed,
    rate_limit,
    split_ranges,
)
from unaligned.record_batches import (
    MAX_BATCH_ROWS,
    columns_from_consumer_records,
    install_columnar_fetch,
    to_record_batches,
)
from unaligned.source_options import (
    Assign,
    EarliestStart,
    LatestStart,
    NoMatchStrategy,
    OffsetsStart,
    PartitionTimestampsStart,
    SourceOptions,
    Subscribe,
    SubscribePattern,
    TimestampStart,
)

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


def _loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(f"{message}. Set the option failOnDataLoss=false to continue with the records left.")
    logger.warning("%s (failOnDataLoss=false: continuing with the records still available)", message)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver-side reader; one instance serves every batch of a query run."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._lookup = OffsetLookup(
            options.kafka, options.fetch_offset_num_retries, options.fetch_offset_retry_interval_ms
        )
        self._available_now_target: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] | None = None
        self._last_trigger_ms = 0

    # --- partition discovery --------------------------------------------------------------

    def _discover(self, known: Collection[TopicPartition]) -> list[TopicPartition]:
        """The partitions the subscription covers now. A topic (or assigned partition) that
        does not exist and was never read raises TopicNotFoundError after the lookup retries;
        one that was read before (in ``known``) is left out: planning reports it as lost."""
        known_topics = {tp.topic for tp in known}
        sub = self._options.subscription
        for attempt in range(1, self._options.fetch_offset_num_retries + 1):
            topics = self._lookup.topics()
            if isinstance(sub, SubscribePattern):
                return [TopicPartition(t, p) for t in sorted(topics) if sub.matches(t) for p in topics[t]]
            if isinstance(sub, Subscribe):
                wanted = [TopicPartition(t, p) for t in sub.topics if t in topics for p in topics[t]]
                missing = [t for t in sub.topics if t not in topics and t not in known_topics]
                what = "topic(s) " + ", ".join(missing) + " named by option 'subscribe'"
            else:
                assert isinstance(sub, Assign)
                wanted = [tp for tp in sub.partitions if tp.partition in topics.get(tp.topic, ())]
                absent = [tp for tp in sub.partitions if tp not in wanted and tp not in known]
                missing = sorted({tp.topic for tp in absent if tp.topic not in topics})
                what = "topic(s) " + ", ".join(missing) + " named by option 'assign'"
                if not missing and absent:
                    what = f"partition(s) {format_partitions(absent)} named by option 'assign'"
                    missing = [str(tp) for tp in absent]
            if not missing:
                return sorted(wanted)
            if attempt < self._options.fetch_offset_num_retries:
                time.sleep(self._options.fetch_offset_retry_interval_ms / 1000.0)
        raise TopicNotFoundError(f"{what} do(es) not exist on Kafka at {self._options.kafka.bootstrap_servers}")

    def _latest_positions(self, known: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Latest offsets (last stable offsets with read_committed) of the current partitions,
        re-fetched (fetchOffset.numRetries) while one is below a known position: a stale
        leader can answer with an old end offset (KAFKA-7703, as Spark handles it)."""
        tps = self._discover(known)
        latest = self._lookup.latest(tps)
        for _ in range(1, self._options.fetch_offset_num_retries):
            behind = [tp for tp, off in latest.items() if off < known.get(tp, off)]
            if not behind:
                break
            logger.warning("latest offsets of %s are below the query's positions; fetching again", format_partitions(behind))
            time.sleep(self._options.fetch_offset_retry_interval_ms / 1000.0)
            latest = self._lookup.latest(tps)
        return latest

    # --- the starting position --------------------------------------------------------------

    def _resolve_timestamps(self, timestamps: Mapping[TopicPartition, int], option: str) -> dict[TopicPartition, int]:
        found = self._lookup.offsets_for_times(timestamps)
        unmatched = [tp for tp, off in found.items() if off is None]
        if unmatched and self._options.no_match_strategy is NoMatchStrategy.ERROR:
            tp = sorted(unmatched)[0]
            raise OptionError(
                f"option '{option}': no record at or after timestamp {timestamps[tp]} in {tp} "
                "(set startingOffsetsByTimestampStrategy=latest to start those partitions at their latest offset)"
            )
        latest = self._lookup.latest(unmatched)
        return {tp: latest[tp] if off is None else off for tp, off in found.items()}

    def _check_named(self, named: Collection[TopicPartition], tps: Collection[TopicPartition], option: str) -> None:
        if set(named) != set(tps):
            raise OptionError(
                f"option '{option}' must name every partition the query reads (use -2 for earliest, "
                f"-1 for latest); named: {format_partitions(named)}; partitions: {format_partitions(tps)}"
            )

    def initialOffset(self) -> dict:
        """The starting position of a new query (startingTimestamp > startingOffsetsByTimestamp >
        startingOffsets, as in Spark)."""
        tps = self._discover(())
        start = self._options.starting
        if isinstance(start, EarliestStart):
            positions = self._lookup.earliest(tps)
        elif isinstance(start, LatestStart):
            positions = self._lookup.latest(tps)
        elif isinstance(start, OffsetsStart):
            self._check_named(start.positions, tps, "startingOffsets")
            earliest = self._lookup.earliest([tp for tp, p in start.positions.items() if p is Boundary.EARLIEST])
            latest = self._lookup.latest([tp for tp, p in start.positions.items() if p is Boundary.LATEST])
            positions = {
                tp: earliest[tp] if p is Boundary.EARLIEST else latest[tp] if p is Boundary.LATEST else p
                for tp, p in start.positions.items()
            }
        elif isinstance(start, TimestampStart):
            positions = self._resolve_timestamps({tp: start.timestamp_ms for tp in tps}, "startingTimestamp")
        else:
            assert isinstance(start, PartitionTimestampsStart)
            self._check_named(start.timestamps, tps, "startingOffsetsByTimestamp")
            positions = self._resolve_timestamps(start.timestamps, "startingOffsetsByTimestamp")
        logger.info("initial offsets: %s", positions)
        return SourceOffset(positions).to_json()

    # --- admission control -----------------------------------------------------------------

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` -> ReadMaxRows; else ``minOffsetsPerTrigger`` -> ReadMinRows;
        else ReadAllAvailable. pyspark has no composite limit: when both are set, ReadMaxRows is
        returned and :meth:`latestOffset` applies ``minOffsetsPerTrigger`` / ``maxTriggerDelay``
        from the options whenever the engine passes this default (not ReadAllAvailable)."""
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        if self._options.min_offsets_per_trigger is not None:
            return ReadMinRows(self._options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _min_rows_hold_back(self, min_rows: int | None, available: int) -> bool:
        """Spark's minOffsetsPerTrigger + maxTriggerDelay: wait while fewer records are
        available, until the delay since the last batch has passed. Not applied with
        Trigger.AvailableNow (it would wait for records that never come)."""
        if min_rows is None or self._available_now_target is not None:
            return False
        now_ms = int(time.time() * 1000)
        if min_rows_delay_passed(now_ms, self._last_trigger_ms, self._options.max_trigger_delay_ms):
            self._last_trigger_ms = now_ms
            return False
        if available < min_rows:
            return True
        self._last_trigger_ms = now_ms
        return False

    def _idle_barrier_due(self) -> bool:
        """Whether to force an empty idle-barrier batch when no records arrived (later work)."""
        return False

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch: the latest offsets, under the read limit. Returns
        ``start`` itself when there is nothing new (Spark then plans no batch)."""
        begin = SourceOffset.from_json(start, "the start offset from Spark's offset log")
        if self._available_now_target is not None:
            latest = dict(self._available_now_target)
        else:
            latest = self._latest_positions(begin.positions)
        self._latest = latest
        froms = dict(begin.positions)
        new = [tp for tp in latest if tp not in froms]
        if new:
            froms.update(self._lookup.earliest(new))
            froms.update({tp: latest[tp] for tp in new if tp not in froms})
        end = latest
        if not isinstance(limit, ReadAllAvailable):
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self._options.max_offsets_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self._options.min_offsets_per_trigger
            if self._min_rows_hold_back(min_rows, available_records(froms, latest)):
                end = dict(begin.positions)
            elif max_rows is not None:
                end = rate_limit({tp: froms[tp] for tp in latest}, latest, max_rows)
        if end == dict(begin.positions):
            if self._idle_barrier_due():
                return SourceOffset(begin.positions, begin.idle_barrier + 1).to_json()
            return start
        return SourceOffset(end, begin.idle_barrier).to_json()

    def reportLatestOffset(self) -> dict | None:
        return None if not self._latest else SourceOffset(self._latest).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the query reads up to the latest offsets of now and never past them."""
        self._available_now_target = self._latest_positions({})
        logger.info("Trigger.AvailableNow target offsets: %s", self._available_now_target)

    # --- planning ---------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        """One task per topic-partition of ``end`` in (topic, partition) order, empty ranges
        included; split further with minPartitions / maxRecordsPerPartition."""
        begin = SourceOffset.from_json(start, "the start offset from Spark's offset log")
        finish = SourceOffset.from_json(end, "the end offset from Spark's offset log")
        if begin == finish:
            return []
        fail = self._options.fail_on_data_loss
        gone = sorted(set(begin.positions) - set(finish.positions))
        if gone:
            _loss(fail, f"partitions {format_partitions(gone)} are gone (topic deleted?); records from offsets "
                  + ", ".join(f"{tp}@{begin.positions[tp]}" for tp in gone) + " on were not read")
        topics = self._lookup.topics() if finish.positions else {}
        existing = [tp for tp in finish.positions if tp.partition in topics.get(tp.topic, ())]
        vanished = sorted(set(finish.positions) - set(existing))
        if vanished:
            _loss(fail, f"partitions {format_partitions(vanished)} disappeared while the batch was planned (topic deleted?)")
        earliest = self._lookup.earliest(existing)
        ranges: list[OffsetRange] = []
        for tp in sorted(finish.positions):
            until = finish.positions[tp]
            if tp in vanished:
                ranges.append(OffsetRange(tp, until, until))
                continue
            if tp in begin.positions:
                frm = begin.positions[tp]
            else:
                frm = earliest[tp]
                if frm != 0:
                    _loss(fail, f"partition {tp} was added and starts at offset {frm}, not 0: records [0, {frm}) were never read")
            if until < frm:
                _loss(fail, f"the offset of {tp} went back from {frm} to {until} (topic recreated?); records may be lost")
                frm = until
            elif frm < earliest[tp]:
                lost_to = min(earliest[tp], until)
                _loss(fail, f"records of {tp} at offsets [{frm}, {lost_to}) are gone (retention or deleted "
                      "records) before the query read them")
                frm = lost_to
            ranges.append(OffsetRange(tp, frm, until))
        pieces = split_ranges(ranges, self._options.min_partitions, self._options.max_records_per_partition)
        return [
            KafkaInputPartition(
                index=i,
                range=piece,
                kafka=self._options.kafka,
                include_headers=self._options.include_headers,
                fail_on_data_loss=fail,
                poll_timeout_ms=self._options.poll_timeout_ms,
            )
            for i, piece in enumerate(pieces)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in Kafka."""

    def stop(self) -> None:
        self._lookup.close()


# --- executor side --------------------------------------------------------------------------


def _skip_lost(consumer: object, ktp: KafkaTopicPartition, part: KafkaInputPartition, next_offset: int) -> int:
    """Handle an out-of-range position: DataLossError, or (failOnDataLoss=false) seek past the
    gap. Returns the new next offset to read."""
    tp, rng = part.range.tp, part.range
    timeout = part.kafka.request_timeout_ms
    earliest = consumer.beginning_offsets([ktp], timeout_ms=timeout)[ktp]  # type: ignore[attr-defined]
    if earliest > next_offset:
        skip_to = min(earliest, rng.end)
        message = f"records of {tp} at offsets [{next_offset}, {skip_to}) are gone (retention or deleted records) before the query read them"
    else:
        latest = consumer.end_offsets([ktp], timeout_ms=timeout)[ktp]  # type: ignore[attr-defined]
        skip_to = rng.end
        message = (f"offset {next_offset} of {tp} is outside the partition's offsets [{earliest}, {latest}) "
                   f"(topic recreated or truncated?); records [{next_offset}, {rng.end}) cannot be read")
    _loss(part.fail_on_data_loss, message)
    if skip_to < rng.end:
        consumer.seek(ktp, skip_to)  # type: ignore[attr-defined]
    return skip_to


def read_partition(part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly offsets ``[start, end)`` of one partition as Arrow batches.

    Stops when the consumer's position reaches ``end`` even if no record carries the last
    offsets (transaction markers and aborted records occupy offsets: SPARK-25005). Fails with
    KafkaUnavailableError after ``kafkaConsumer.pollTimeoutMs`` without progress.
    """
    rng = part.range
    if rng.size == 0:
        return
    tp = rng.tp
    consumer = open_consumer(part.kafka)
    try:
        columnar = install_columnar_fetch(consumer, part.include_headers)
        ktp = KafkaTopicPartition(tp.topic, tp.partition)
        consumer.assign([ktp])
        consumer.seek(ktp, rng.start)
        next_offset = rng.start
        last_progress = time.monotonic()
        while next_offset < rng.end:
            try:
                polled = consumer.poll(timeout_ms=POLL_SLICE_MS, max_records=1 if columnar else MAX_BATCH_ROWS)
            except kafka_errors.OffsetOutOfRangeError:
                next_offset = _skip_lost(consumer, ktp, part, next_offset)
                last_progress = time.monotonic()
                continue
            items = polled.get(ktp, [])
            chunks = items if columnar else ([columns_from_consumer_records(items, part.include_headers)] if items else [])
            before = next_offset
            for columns in chunks:
                columns = columns.before(rng.end)
                if len(columns):
                    yield from to_record_batches(columns, tp, part.include_headers)
                    next_offset = int(columns.offsets[-1]) + 1
            position = consumer.position(ktp, timeout_ms=part.kafka.request_timeout_ms)
            if position is not None and position > next_offset:
                next_offset = position
            now = time.monotonic()
            if next_offset > before:
                last_progress = now
            elif (now - last_progress) * 1000 > part.poll_timeout_ms:
                earliest = consumer.beginning_offsets([ktp], timeout_ms=part.kafka.request_timeout_ms)[ktp]
                if earliest > next_offset:
                    next_offset = _skip_lost(consumer, ktp, part, next_offset)
                    last_progress = now
                    continue
                raise KafkaUnavailableError(
                    f"no records of {tp} at offsets [{next_offset}, {rng.end}) arrived from Kafka at "
                    f"{part.kafka.bootstrap_servers} within kafkaConsumer.pollTimeoutMs={part.poll_timeout_ms}"
                )
    except kafka_errors.KafkaTimeoutError as exc:
        raise KafkaUnavailableError(
            f"Kafka at {part.kafka.bootstrap_servers} did not answer while reading {tp} [{rng.start}, {rng.end}): {exc!r}"
        ) from exc
    finally:
        consumer.close(autocommit=False, timeout_ms=1000)
