"""The source's driver side: offsets and the plan of each batch, one :class:`BatchPlanning` per
query run, kept by the stream reader (:mod:`unaligned.source.stream_reader`) in Spark's source
runner from the first call that needs the broker.

It discovers partitions (:mod:`.partition_discovery`), resolves the starting position and
bounded input's ends (:mod:`.position_resolution`), computes each batch's end under the read
limits, plans the batch's read tasks (:mod:`.range_planning`), asks for idle barriers
(:mod:`unaligned.barriers.idle`) and acts on stop requests (:mod:`unaligned.source.stopping`).
The batch reader plans with it too. Call order, data loss, restarts and bounded input:
ARCHITECTURE.md, "Module notes", ``source/stream_reader.py``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)

from unaligned.barriers import idle as idle_barriers
from unaligned.barriers.idle import IdleBarrierTrigger, new_token
from unaligned.kafka.clients.offset_lookup import OffsetLookup
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.group_offsets import GroupOffsets
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition
from unaligned.source.planning.backlog_limit import BacklogLimit
from unaligned.source.planning.batch_sizing import UNCAPPED_ROWS, BatchSizer
from unaligned.source.planning.offset_ranges import (
    OffsetRange,
    available_records,
    group_ranges,
    min_rows_delay_passed,
    rate_limit,
)
from unaligned.source.planning.partition_discovery import (
    confirmed_gone,
    discover,
    latest_positions,
    subscribed,
)
from unaligned.source.planning.position_resolution import resolve_range
from unaligned.source.planning.range_planning import plan_ranges
from unaligned.source.planning.task_layout import (
    describe_change,
    drain_offset,
    drain_ranges,
    layout_changes,
    splits_ranges,
)
from unaligned.source.stopping import SourceStops

logger = logging.getLogger(__name__)


class BatchPlanning:
    """The driver side of one query run: the stream reader delegates its methods here.
    ``lookup`` answers the broker questions (tests pass a fake broker)."""

    def __init__(self, options: SourceOptions, lookup: OffsetLookup | None = None) -> None:
        self._options = options
        self._lookup = lookup or OffsetLookup(
            options.kafka, options.fetch_offset_num_retries, options.fetch_offset_retry_interval_ms
        )
        self._idle_barriers = IdleBarrierTrigger()
        self._backlog = BacklogLimit()
        self._sizer = (
            BatchSizer(options.target_batch_duration_ms, time.monotonic)
            if options.target_batch_duration_ms is not None
            else None
        )
        self._stops = SourceStops(bounded_by_options=options.ending is not None)
        self._group_offsets = GroupOffsets(options.kafka, options.group_id_prefix)
        self._available_now_target: dict[TopicPartitionId, int] | None = None
        self._target_dropped: set[TopicPartitionId] = set()
        self._latest: dict[TopicPartitionId, int] | None = None
        self._just_planned: dict[str, Any] | None = None
        """The end :meth:`latest_offset` last returned from a topic listing (not listed again)."""
        self._last_trigger_ms = 0
        self._token: str | None = None
        """The barrier token :meth:`initial_offset` gave a new query; another is a past run's."""

    # --- the starting position --------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        """The starting position of a new query (startingTimestamp > startingOffsetsByTimestamp >
        startingOffsets, as in Spark), with the resolved ends of a bounded query."""
        positions, ending = self.resolve_range()
        if self._token is None:
            self._token = new_token()
        read_tasks = self.read_tasks()
        logger.info(
            "reading %d topic-partitions with %d read tasks per batch (readTasks%s)",
            len(positions),
            min(read_tasks, max(1, len(positions))),
            "" if self._options.read_tasks is not None else ": the cores of this host",
        )
        initial = KafkaSourceOffset.initial(positions, self._token, ending, read_tasks)
        return self._identified(initial).to_json()

    def read_tasks(self) -> int:
        """Read tasks per batch for a new query: ``readTasks``, else the cores of the host
        that plans the batches. Spark tells a Python source nothing about its executors (the
        source runner sees no SparkConf), so on a cluster whose executors have more cores than
        this host, set ``readTasks`` (docs/guides/reading-kafka.md, "Read tasks")."""
        return self._options.read_tasks or os.cpu_count() or 1

    def resolve_range(
        self,
    ) -> tuple[dict[TopicPartitionId, int], dict[TopicPartitionId, int] | None]:
        """(starting positions, exclusive ends or None) of every partition the query reads."""
        return resolve_range(self._options, self._lookup)

    # --- admission control -----------------------------------------------------------------

    def default_read_limit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` -> ReadMaxRows; else ``maxBytesPerTrigger`` -> ReadMaxBytes;
        else ``minOffsetsPerTrigger`` -> ReadMinRows; else an uncapped ReadMaxRows. pyspark has no
        composite limit: :meth:`latest_offset` applies the other options whenever the engine
        passes this default (not ReadAllAvailable)."""
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        if self._options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        if self._options.min_offsets_per_trigger is not None:
            return ReadMinRows(self._options.min_offsets_per_trigger)
        # Not ReadAllAvailable, so that latestOffset may size the batch (targetBatchDuration,
        # the sink's backlog: source/planning/backlog_limit.py); no row cap itself.
        return ReadMaxRows(UNCAPPED_ROWS)

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

    def _idle_barrier_due(self, begin: KafkaSourceOffset) -> bool:
        """Whether to force an empty idle-barrier batch now that no records arrived: the sink
        left channel state pending (see :mod:`unaligned.barriers.idle`)."""
        return begin.barrier_token is not None and self._idle_barriers.due(begin.barrier_token)

    def _resumed(self, begin: KafkaSourceOffset) -> bool:
        """Whether ``begin`` comes from an earlier run (not from this reader's
        :meth:`initial_offset`)."""
        return self._token is None or begin.barrier_token != self._token

    def _extend_target(self, known: Mapping[TopicPartitionId, int]) -> None:
        """Trigger.AvailableNow: known partitions the target's listing left out join the
        target at their latest offsets unless the broker confirms them deleted."""
        assert self._available_now_target is not None
        target = self._available_now_target
        unlisted = [
            tp
            for tp in known
            if tp not in target
            and tp not in self._target_dropped
            and subscribed(self._options.subscription, tp)
        ]
        if unlisted:
            gone = confirmed_gone(self._lookup, unlisted)
            self._target_dropped |= gone
            target.update(self._lookup.latest([tp for tp in unlisted if tp not in gone]))

    def latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch: the latest offsets, under the read limit. Returns
        ``start`` itself when there is nothing new (Spark then plans no batch), unless an idle
        barrier is due: the sink left channel state pending, or this is the first call of a
        reader resuming from an earlier run's offset (see the module docstring)."""
        begin = self._stops.resumed(
            KafkaSourceOffset.from_json(start, "the start offset from Spark's offset log")
        )
        resume_barrier = self._idle_barriers.start_of_run(self._resumed(begin))
        resume_barrier &= not begin.end_of_data()  # a final checkpoint left nothing pending
        request = self._stops.poll(begin)
        if request is not None and not request[1].drain:
            self._stops.hold(*request)
        if self._stops.held:
            return start
        if begin.end_of_data():
            latest = dict(begin.positions)
        elif self._available_now_target is not None:
            self._extend_target(begin.positions)
            latest = dict(self._available_now_target)
        else:
            latest = latest_positions(self._options, self._lookup, begin.positions)
        draining = request is not None and not begin.end_of_data()
        if request is not None:
            begin = self._stops.drain(*request, begin, latest)
        if begin.ending is not None:
            latest = begin.bounded(latest)
        self._latest = latest
        # readTasks if given (a new count applies after a layout drain), else the last count
        read_tasks = self._options.read_tasks or begin.read_tasks
        if layout_changes(self._options, begin, latest, read_tasks):
            logger.info(
                "layout drain: the task layout changes (%s); this batch reads nothing and "
                "writes every pending row at the old layout, the new one applies from the next",
                describe_change(begin, latest, read_tasks),
            )
            # Not identified: it keeps begin's topic ids, which the next batch checks.
            return self._planned_from_listing(drain_offset(begin))
        froms = dict(begin.positions)
        new = [tp for tp in latest if tp not in froms]
        if new:
            froms.update(self._lookup.earliest(new))
            froms.update({tp: latest[tp] for tp in new if tp not in froms})
        end = latest
        if not isinstance(limit, ReadAllAvailable):
            # The engine passes ReadAllAvailable or our default limit; a ReadMaxRows /
            # ReadMinRows / ReadMaxBytes it passes wins over its option, the others apply.
            max_rows = self._options.max_offsets_per_trigger
            min_rows = self._options.min_offsets_per_trigger
            if isinstance(limit, ReadMaxRows):
                max_rows = limit.max_rows
            if isinstance(limit, ReadMinRows):
                min_rows = limit.min_rows
            all_there = begin.ending is not None and all(
                latest.get(tp, end) >= end for tp, end in begin.ending.items()
            )
            if not all_there and self._min_rows_hold_back(
                min_rows, available_records(froms, latest)
            ):
                end = dict(begin.positions)
            else:
                if max_rows is not None:
                    end = rate_limit({tp: froms[tp] for tp in latest}, latest, max_rows)
                if self._sizer is not None:
                    end = self._size_batch({tp: froms[tp] for tp in end}, end)
                max_bytes = getattr(limit, "max_bytes", self._options.max_bytes_per_trigger)
                if max_bytes is not None:
                    from unaligned.source.planning.byte_limit import byte_limit  # numpy, pyarrow

                    end = byte_limit(self._options, froms, end, max_bytes)
                end = self._behind_the_sink(begin, {tp: froms[tp] for tp in end}, end)
        if end == dict(begin.positions):
            hinted = self._idle_barrier_due(begin)
            if hinted or resume_barrier or draining:
                if resume_barrier:
                    logger.info(
                        "idle barrier: the first barrier after resuming from an earlier run "
                        "(writes channel state it left pending)"
                    )
                return self._planned_from_listing(
                    self._identified(
                        begin.next(begin.positions, begin.idle_barrier + 1, read_tasks)
                    )
                )
            if self._available_now_target is not None and all(
                begin.positions.get(tp, offset) >= offset for tp, offset in latest.items()
            ):
                self._stops.read_everything(begin)  # Spark ends the query after this call
            return start
        return self._planned_from_listing(
            self._identified(begin.next(end, begin.idle_barrier, read_tasks))
        )

    def _planned_from_listing(self, offset: KafkaSourceOffset) -> dict[str, Any]:
        """``offset`` as JSON, remembered when its partitions come from this call's listing
        (not from a fixed Trigger.AvailableNow target or a finished input)."""
        planned = offset.to_json()
        listed = self._available_now_target is None and not offset.end_of_data()
        self._just_planned = planned if listed else None
        return planned

    def _identified(self, offset: KafkaSourceOffset) -> KafkaSourceOffset:
        """``offset`` with its topics' ids as the broker gives them now (one metadata request
        per batch; :meth:`_plan_ranges` compares them) and ``splitRanges`` (minPartitions)."""
        topics = {tp.topic for tp in offset.positions}
        known = {t: i for t, i in offset.topic_ids.items() if t in topics}
        ids = {**known, **self._lookup.topic_ids(topics)}
        return replace(offset, topic_ids=ids, split_ranges=splits_ranges(self._options))

    def _behind_the_sink(
        self,
        begin: KafkaSourceOffset,
        froms: dict[TopicPartitionId, int],
        end: dict[TopicPartitionId, int],
    ) -> dict[TopicPartitionId, int]:
        """Cap the batch while the sink's pending channel state grows
        (:mod:`unaligned.source.planning.backlog_limit`)."""
        hint = idle_barriers.read(begin.barrier_token) if begin.barrier_token else None
        backlog = sum(1 for tp in end if end[tp] > froms[tp])
        cap = self._backlog.cap(hint, backlog)
        if cap is not None:
            end = rate_limit(froms, end, cap)
        self._backlog.planned(available_records(froms, end))
        return end

    def _size_batch(
        self, froms: dict[TopicPartitionId, int], end: dict[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, int]:
        """Apply ``targetBatchDuration`` on top of the other limits."""
        assert self._sizer is not None
        backlog = sum(1 for tp in end if end[tp] > froms[tp])
        cap = self._sizer.cap(backlog)
        sized = rate_limit(froms, end, cap)
        self._sizer.planned(available_records(froms, sized), cap)
        return sized

    def report_latest_offset(self) -> dict[str, Any] | None:
        return None if not self._latest else KafkaSourceOffset(self._latest).to_json()

    def prepare_for_trigger_available_now(self) -> None:
        """Fix the target: the query reads up to the latest offsets of now and never past them.

        Called before the start offset is known: a subscribed topic missing here is not an
        error yet (a new query's :meth:`initial_offset` raises TopicNotFoundError for it), and a
        known partition this listing leaves out joins the target in :meth:`latest_offset`
        unless the broker confirms it deleted."""
        self._available_now_target = self._lookup.latest(
            discover(self._options, self._lookup, (), strict=False)
        )
        logger.info("Trigger.AvailableNow target offsets: %s", self._available_now_target)

    # --- planning ---------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaInputPartition]:
        """The batch's read tasks: the topic-partitions of ``end`` grouped into the read tasks
        ``end`` records (the option for offsets that record none), empty ranges included; or
        split with minPartitions / maxRecordsPerPartition. A layout drain's ``end`` has the
        previous batch's positions and count: empty ranges at the old layout."""
        finish = KafkaSourceOffset.from_json(end, "the end offset from Spark's offset log")
        passed = KafkaSourceOffset.from_json(start, "the start offset from Spark's offset log")
        # A batch planned before any latestOffset is Spark re-running the last batch of an
        # earlier run: its sink commit publishes the idle-barrier hint on this host.
        self._idle_barriers.batch_planned()
        self._stops.planned(finish)
        begin = finish.batch_start(passed)
        if begin.positions == finish.positions and begin.idle_barrier == finish.idle_barrier:
            return []
        read_tasks = (
            finish.read_tasks if finish.read_tasks is not None else self._options.read_tasks
        )
        if finish.layout_drain:
            self._just_planned = None
            return self._partitions(drain_ranges(finish), read_tasks)
        return self.plan(begin, finish, read_tasks)

    def plan(
        self, begin: KafkaSourceOffset, finish: KafkaSourceOffset, read_tasks: int | None
    ) -> list[KafkaInputPartition]:
        """The read tasks from ``begin`` to ``finish`` (also used by the batch reader);
        ``read_tasks`` ``None``: one per topic-partition."""
        listed_now = self._just_planned is not None and finish.to_json() == self._just_planned
        self._just_planned = None
        return self._partitions(
            plan_ranges(self._options, self._lookup, begin, finish, listed_now=listed_now),
            read_tasks,
        )

    def _partitions(
        self, ranges: list[OffsetRange], read_tasks: int | None
    ) -> list[KafkaInputPartition]:
        groups = group_ranges(
            ranges,
            read_tasks,
            self._options.min_partitions,
            self._options.max_records_per_partition,
        )
        return [
            KafkaInputPartition(
                index=i,
                ranges=group,
                kafka=self._options.kafka,
                include_headers=self._options.include_headers,
                fail_on_data_loss=self._options.fail_on_data_loss,
                poll_timeout_ms=self._options.poll_timeout_ms,
                schema_id_headers=self._options.formats is not None,
            )
            for i, group in enumerate(groups)
        ]

    def commit(self, end: dict[str, Any]) -> None:
        """Offsets live in Spark's checkpoint; with a consumer group, ``end`` is also committed
        there, for monitoring only (:mod:`unaligned.source.group_offsets`)."""
        self._group_offsets.commit(KafkaSourceOffset.from_json(end, "the committed end offset"))

    def stop(self) -> None:
        self._lookup.close()
        self._group_offsets.close()
