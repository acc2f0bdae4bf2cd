"""The exactly-once sink's writer: a two-phase commit with one durable decision per micro-batch.

:class:`TwoPhaseCommitWriter` is what Spark calls for ``writeStream.format("unaligned")``, for
Kafka transactions (:mod:`unaligned.sink.topics.kafka_participant`) and Parquet files
(:mod:`unaligned.sink.files.file_participant`) alike. It runs protocol steps 1 (pre-commit, in every
task), 2 (decide and commit, in the commit runner) and 4 (abort); step 3 (recovery, in Spark's
planner) is :mod:`unaligned.sink.recovery`, called from
:mod:`unaligned.sink.stream_writer_factory`. Steps are numbered where they run. The decision is
the batch's commit record (:mod:`unaligned.sink.commit_log`); transactional ids come from
:mod:`unaligned.sink.topics.kafka_id_pool`; what a barrier publishes is
:mod:`unaligned.sink.barrier_outcome`. ARCHITECTURE.md, "The two-phase commit" and "Processes",
has the protocol and which Spark process runs each step.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from unaligned._util import crash_points
from unaligned._util.crash_points import CrashPoint, FailPoint
from unaligned._util.process_memo import ProcessMemo
from unaligned.barriers.alignment import BarrierAlignment, CheckpointMode
from unaligned.barriers.barrier import read_barrier, reads_nothing, splits_ranges, wall_clock_ms
from unaligned.barriers.metrics import purge_metrics
from unaligned.barriers.offset_log import read_offset_log
from unaligned.errors import CommitLogError, TaskContextError
from unaligned.sink.barrier_outcome import after_barrier, collect_channel_state_garbage
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import PendingPolicy, SinkOptions
from unaligned.sink.participant import Participant, SinkCommitMessage, TaskOutcome, TaskWriter
from unaligned.sink.pending_layout import pending_after
from unaligned.sink.recovery import check_participant, commit_record, prepared_items, roll_forward
from unaligned.tuning.worker_memory import tune_worker_memory

logger = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class TwoPhaseCommitWriter(DataSourceStreamArrowWriter):
    """The stream writer Spark pickles into every task and rebuilds for every commit/abort."""

    def __init__(
        self,
        options: SinkOptions,
        participant: Participant,
        planned_at_ms: int | None = None,
        *,
        input_schema: pa.Schema | None = None,
        sink_columns: frozenset[str] | None = None,
    ) -> None:
        """``planned_at_ms``: when Spark planned this batch's write (``None`` outside Spark's
        planner). A batch re-run after a restart keeps the start time of the run that first
        planned it; its deadline then counts from the planning time instead.
        ``input_schema`` / ``sink_columns``: the sink's input as Spark declared it and the
        columns it writes, so channel state replays by column name even in a task with no
        input rows (:class:`unaligned.barriers.alignment.BarrierAlignment`)."""
        self._options = options
        self._participant = participant
        self._planned_at_ms = planned_at_ms
        self._input_schema = input_schema
        self._sink_columns = sink_columns

    @property
    def participant(self) -> Participant:
        return self._participant

    def _log(self) -> CommitLog:
        return CommitLog(self._options.checkpoint)

    # Step 1 -----------------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise TaskContextError("the sink's write() must run in a Spark task")
        tune_worker_memory()
        batch_property = context.getLocalProperty(BATCH_ID_PROPERTY)
        if batch_property is None:
            raise TaskContextError(f"task local property {BATCH_ID_PROPERTY} is not set")
        batch_id = int(batch_property)
        partition_id, attempt = context.partitionId(), context.attemptNumber()

        # 1a. A decided batch (replayed after a crash): consume the input, open nothing.
        if self._log().read(batch_id) is not None:
            rows = sum(batch.num_rows for batch in iterator)
            logger.info(
                "batch %d partition %d: already decided by an earlier run; %d rows not rewritten",
                batch_id,
                partition_id,
                rows,
            )
            return SinkCommitMessage(
                batch_id, partition_id, attempt, rows, TaskOutcome.ALREADY_DECIDED, None
            )

        # 1b. The barrier: replay inherited channel state, write new rows chunk by chunk, cut
        #     at the deadline in unaligned mode (unaligned.barriers.alignment). The transaction /
        #     staging file opens with the first row written; until then the process warms up on
        #     a thread (imports, kept connections; Participant.warm_up asks and claims nothing),
        #     joined before the open and before write() returns.
        alignment = self._barrier_alignment(
            batch_id, partition_id, attempt, context.taskAttemptId()
        )
        task: TaskWriter | None = None

        def write_chunk(chunk: pa.RecordBatch) -> None:
            nonlocal task
            if task is None:
                warm_up.join()
                # 1a again, right before anything opens: a zombie attempt (speculative, of a
                # failed stage, of an earlier run) whose batch was decided meanwhile opens
                # nothing that could fence a later batch's transaction.
                if self._log().read(batch_id) is not None:
                    raise _DecidedMeanwhile()
                task = self._participant.open_task(batch_id, partition_id, attempt)
            task.write_chunk(chunk)
            task.between_chunks()

        warm_up = _WarmUp(self._participant.warm_up)
        try:
            try:
                outcome = alignment.run(iterator, write_chunk, wall_clock_ms)
            except _DecidedMeanwhile:
                rows = sum(batch.num_rows for batch in iterator)
                logger.info(
                    "batch %d partition %d: decided while this attempt ran; it writes nothing",
                    batch_id,
                    partition_id,
                )
                return SinkCommitMessage(
                    batch_id, partition_id, attempt, rows, TaskOutcome.ALREADY_DECIDED, None
                )
            # 1c. Pre-commit: flush and describe what is prepared; nothing is visible yet.
            prepared = task.prepare() if task is not None else None
        except BaseException:
            if task is not None:
                _abort_quietly(task, batch_id, partition_id)
            raise
        finally:
            warm_up.join()
            if task is not None:
                task.close()
        rows = outcome.stats.rows_written

        # 1d. Decided while this attempt wrote (a zombie: speculative, of a failed stage, killed
        #     too late): the decision was made without its message, so nothing will ever name
        #     what it prepared, and its batch's clean-up (2f) may have run before its files or
        #     transaction existed. It aborts its own work: whatever it prepared existed before
        #     this read, so a decision made after it is followed by a clean-up that sees it.
        if prepared is not None and self._log().read(batch_id) is not None:
            logger.info(
                "batch %d partition %d attempt %d: decided while this attempt wrote; its "
                "prepared work is aborted",
                batch_id,
                partition_id,
                attempt,
            )
            self._participant.abort([prepared], batch_id)
            return SinkCommitMessage(
                batch_id, partition_id, attempt, rows, TaskOutcome.ALREADY_DECIDED, None
            )

        crash_points.reach(CrashPoint.TASK_AFTER_PRECOMMIT, batch_id)
        crash_points.fail_first_attempt(FailPoint.TASK_FIRST_ATTEMPT, batch_id, attempt)
        return SinkCommitMessage(
            batch_id,
            partition_id,
            attempt,
            rows,
            TaskOutcome.EMPTY if prepared is None else TaskOutcome.PREPARED,
            prepared,
            outcome.pending,
            outcome.stats.to_dict(),
        )

    def _barrier_alignment(
        self, batch_id: int, partition_id: int, attempt: int, attempt_id: int
    ) -> BarrierAlignment:
        settings = self._options.alignment
        barrier = read_barrier(self._options.checkpoint, batch_id)
        if settings.mode is CheckpointMode.UNALIGNED and barrier.cuts_nothing:
            # The final checkpoint (unaligned.finishing, step 1), or a source's layout drain
            # (its task layout changes next batch): replay everything, cut nothing.
            settings = dataclasses.replace(settings, mode=CheckpointMode.ALIGNED)
        elif settings.mode is CheckpointMode.UNALIGNED and not barrier.idle_barriers:
            # No source of this batch emits idle barriers: rows left pending might never be
            # written (the query could end first), so this barrier does not cut.
            _warn_aligned_once()
            settings = dataclasses.replace(settings, mode=CheckpointMode.ALIGNED)
        not_before: int | None = None
        if (
            self._planned_at_ms is not None
            and self._planned_at_ms - barrier.start_ms > settings.timeout_ms
        ):
            not_before = self._planned_at_ms  # a re-run of a batch planned by an earlier run
        previous = self._log().latest_before(batch_id)
        inherited = previous.channel_state.get(partition_id, ()) if previous is not None else ()
        return BarrierAlignment(
            settings,
            barrier,
            barrier.deadline(settings.timeout_ms, not_before_ms=not_before),
            partition_id,
            attempt,
            str(attempt_id),
            inherited,
            input_schema=self._input_schema,
            sink_columns=self._sink_columns,
        )

    # Step 2 -----------------------------------------------------------------------------------
    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        started = time.monotonic()
        log = self._log()
        participant = self._participant
        # 2a. Finish earlier batches a crash left decided but unfinished.
        for earlier in log.unfinished_batch_ids():
            if earlier < batchId:
                roll_forward(log, participant, earlier)

        record = log.read(batchId)
        if record is None:
            # 2b. Decide: the commit record is the single point of decision. Only with pending
            #     state this batch's task layout can take (unaligned.sink.pending_layout), with
            #     items that can still commit (a transaction past its timeout cannot), and only
            #     once: a second decider (an earlier run's commit process still running) loses
            #     the race to write the record and rolls the winner's decision forward. The
            #     items are the participant's (a small batch's staged files merged into one).
            offsets = [s.offset for s in read_offset_log(self._options.checkpoint, batchId).sources]
            pending, task_count = pending_after(
                log,
                _messages(messages),
                batchId,
                reads_nothing=reads_nothing(offsets),
                # a source that splits its ranges keeps no task layout: order is not kept anyway
                policy=PendingPolicy.REASSIGN
                if splits_ranges(offsets)
                else self._options.pending_on_rescale,
            )
            items = participant.consolidate(prepared_items(messages, batchId), batchId)
            participant.check_decidable(items, batchId)
            crash_points.reach(CrashPoint.DRIVER_BEFORE_COMMIT_RECORD, batchId)
            record = CommitRecord(
                batchId,
                participant.kind,
                tuple(items),
                int(time.time() * 1000),
                pending,
                task_count,
            )
            if not log.write(record):
                record = self._decided_elsewhere(log, batchId, messages)
            crash_points.reach(CrashPoint.DRIVER_AFTER_COMMIT_RECORD, batchId)
        else:
            # 2b'. Decided by an earlier run: roll that decision forward, discard new messages.
            record = self._decided_elsewhere(log, batchId, messages)

        decided_ms = (time.monotonic() - started) * 1000
        if not log.is_done(batchId):
            # 2c. Commit every prepared item (idempotent); 2d. make the batch visible (files).
            commit_record(log, participant, record, CrashPoint.DRIVER_PARTIAL_COMMIT)
            # 2e. Mark the batch done, with the time commit() took up to here.
            decided_ms = (time.monotonic() - started) * 1000
            log.mark_done(batchId, commit_ms=decided_ms)
        # 2f. Clean up what no record names, up to this batch; prune old records and metrics
        #     (at most minBatchesToRetain of each stay, plus one round); delete
        #     channel state no longer pending; record the barrier's metrics; tell the source
        #     whether an idle barrier is needed.
        participant.clean_up(log, batchId)
        retain = self._options.min_batches_to_retain
        log.prune(retain)
        if batchId % retain == 0:  # one listing of the metrics directory per `retain` batches
            purge_metrics(self._options.checkpoint, batchId + 1 - retain)
        collect_channel_state_garbage(self._options)
        after_barrier(self._options, record, _messages(messages))
        logger.info(
            "batch %d committed by the sink: %d item(s), %.1f ms to done, %.1f ms with cleanup",
            batchId,
            len(record.prepared),
            decided_ms,
            (time.monotonic() - started) * 1000,
        )
        crash_points.reach(CrashPoint.DRIVER_AFTER_SINK_COMMIT, batchId)

    def _decided_elsewhere(
        self, log: CommitLog, batch_id: int, messages: Sequence[WriterCommitMessage | None]
    ) -> CommitRecord:
        """2b'. The batch has a record written by another decider: keep that decision, abort
        what this decider's messages prepared that the record does not name."""
        record = log.read(batch_id)
        if record is None:
            raise CommitLogError(f"commit record {log.describe(batch_id)} vanished after a race")
        participant = self._participant
        check_participant(record, participant, log)
        named = {participant.item_key(item) for item in record.prepared}
        stray = [
            m.prepared
            for m in _messages(messages)
            if m.prepared is not None and participant.item_key(m.prepared) not in named
        ]
        if stray:
            logger.warning(
                "batch %d was decided by another run; aborting %d newly prepared item(s)",
                batch_id,
                len(stray),
            )
            participant.abort(stray, batch_id)
        return record

    # Step 4 -----------------------------------------------------------------------------------
    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """4a. Abort what the messages prepared (never what a commit record names).
        4b. Then abort what tasks killed mid-write left behind (their messages are ``None``):
            the same cleanup as step 2e, up to this batch. Spark fails the query after an
            abort, so no task of this batch will ever be committed in this run."""
        log = self._log()
        record = log.read(batchId)
        named = (
            {self._participant.item_key(i) for i in record.prepared}
            if record is not None
            else set()
        )
        items = [
            m.prepared
            for m in _messages(messages)
            if m.prepared is not None and self._participant.item_key(m.prepared) not in named
        ]
        logger.info("batch %d aborted by Spark: aborting %d prepared item(s)", batchId, len(items))
        if items:
            self._participant.abort(items, batchId)
        self._participant.clean_up(log, batchId)


_WARNED: ProcessMemo[str, bool] = ProcessMemo()


def _warn_aligned_once() -> None:
    if _WARNED.first_time("aligned without our source"):
        logger.warning(
            "checkpointMode=unaligned needs a format('unaligned') source (it emits the idle "
            "barriers that write pending rows); with this query's sources every barrier is "
            "aligned"
        )


class _WarmUp:
    """``work`` on a daemon thread of its own from construction to :meth:`join`. A failure is
    logged, not raised: the task's own calls meet it again, with their retries and messages."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(work,), name="unaligned-sink-warm-up", daemon=True
        )
        self._thread.start()

    @staticmethod
    def _run(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:
            logger.debug("sink task warm-up failed (the task will try itself): %r", exc)

    def join(self) -> None:
        self._thread.join()


class _DecidedMeanwhile(Exception):
    """Raised inside a task's write when its batch got a commit record before it opened."""


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[SinkCommitMessage]:
    return [m for m in messages if isinstance(m, SinkCommitMessage)]


def _abort_quietly(task: TaskWriter, batch_id: int, partition_id: int) -> None:
    try:
        task.abort()
    except Exception as exc:  # the original failure matters more; cleanup fences it later
        logger.warning(
            "batch %d partition %d: abort after a failed write also failed: %r",
            batch_id,
            partition_id,
            exc,
        )
