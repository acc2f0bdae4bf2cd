"""Decided batches: what a commit record names, and finishing it now or after a crash.

The driver's side of the protocol that acts on commit records (:mod:`unaligned.sink.commit_log`):

- Step 2b, decide: :func:`prepared_items` turns a batch's task messages into the items of its
  commit record, refusing anything inconsistent; :func:`check_participant` refuses a record
  written by another sink target.
- Steps 2c-2d, commit: :func:`commit_record` commits every item a record names and makes the
  batch visible.
- Step 3, recover: :func:`roll_forward` finishes a decided but unfinished batch (including what
  a late restart means for Kafka), :func:`recover` rolls every such batch forward and cleans up.

The numbered steps run in :mod:`unaligned.sink.two_phase_commit` (steps 1, 2 and 4; step 3 is
called from :func:`unaligned.sink.stream_writer_factory.build_stream_writer` in Spark's planner).
The participant contract is :mod:`unaligned.sink.participant`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from unaligned._util import crash_points
from unaligned._util.crash_points import CrashPoint
from unaligned.errors import CommitLogError, TransactionCommitError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.participant import Participant, SinkCommitMessage, TaskOutcome

logger = logging.getLogger(__name__)


# Step 2b --------------------------------------------------------------------------------------
def prepared_items(
    messages: Sequence[WriterCommitMessage | None], batch_id: int
) -> list[Mapping[str, Any]]:
    """The prepared items of a batch's successful tasks; refuses anything inconsistent."""
    items: list[Mapping[str, Any]] = []
    partitions: set[int] = set()
    for message in messages:
        if not isinstance(message, SinkCommitMessage):
            raise CommitLogError(
                f"batch {batch_id}: commit got {type(message).__name__} instead of a task's "
                "commit message; refusing to decide without knowing what every task prepared"
            )
        if message.batch_id != batch_id:
            raise CommitLogError(
                f"batch {batch_id}: commit got a message of batch {message.batch_id} "
                f"(partition {message.partition_id})"
            )
        if message.partition_id in partitions:
            raise CommitLogError(
                f"batch {batch_id}: two commit messages for partition {message.partition_id}"
            )
        partitions.add(message.partition_id)
        if message.outcome is TaskOutcome.ALREADY_DECIDED:
            raise CommitLogError(
                f"batch {batch_id}: partition {message.partition_id} found a commit record for "
                f"the batch, but the driver found none"
            )
        if message.prepared is not None:
            items.append(message.prepared)
    return sorted(items, key=lambda item: int(item.get("partition", 0)))


def check_participant(record: CommitRecord, participant: Participant, log: CommitLog) -> None:
    if record.participant != participant.kind:
        raise CommitLogError(
            f"commit record {log.describe(record.batch_id)} was written by the "
            f"{record.participant!r} sink, but this query writes with the {participant.kind!r} "
            "sink; a checkpoint cannot change sink targets"
        )


# Steps 2c-2d ----------------------------------------------------------------------------------
def commit_record(
    log: CommitLog, participant: Participant, record: CommitRecord, partial_point: CrashPoint
) -> None:
    """2c. Commit every item the record names (idempotent); 2d. make the batch visible.

    ``partial_point`` is reached after some but not all items are committed.
    """
    total = len(record.prepared)

    def progress(committed: int) -> None:
        if 0 < committed < total:
            crash_points.reach(partial_point, record.batch_id)

    try:
        participant.commit(record.prepared, record.batch_id, progress)
    except TransactionCommitError as exc:
        raise TransactionCommitError(
            f"{exc}. Commit record: {log.describe(record.batch_id)}. See "
            "unaligned.sink.recovery.roll_forward for what a lost transaction means and "
            "how to replay the batch"
        ) from exc
    participant.finish_batch(record)


# Step 3 ---------------------------------------------------------------------------------------
def roll_forward(
    log: CommitLog,
    participant: Participant,
    batch_id: int,
    partial_point: CrashPoint = CrashPoint.DRIVER_PARTIAL_COMMIT,
) -> None:
    """Finish a decided batch: commit every item its record names, then mark it done.

    Every commit is idempotent (a committed Kafka transaction commits again with success, a
    renamed file is found under its final name), so rolling forward twice is harmless.

    Late restart (Kafka): a prepared transaction older than ``kafka.transaction.timeout.ms`` has
    been aborted by the broker (without two-phase commit), or an operator ended it. Committing it
    then fails with :class:`TransactionCommitError` naming the batch, the commit record, which
    transactions were committed and which refused, and what ended each
    (:mod:`unaligned.sink.topics.kafka_refusals`). The refused transactions' records were never
    visible to read_committed consumers and are gone from Kafka; the query stops and stays
    stopped (every restart fails the same way) rather than skip them, until the operator ends
    the batch with ``unaligned abandon`` (:mod:`unaligned.sink.topics.kafka_abandon`):

    - ``--replay`` when *no* transaction of the batch was committed (the usual case: the crash
      came between the commit record and the first commit): the batch is undecided again; Spark
      replays it from its offset log, the tasks write new transactions and the driver decides
      anew - still exactly once, provided the source still has the batch's input (Kafka
      retention);
    - when *some* were committed, neither choice is exactly once: ``--replay
      --accept-duplicates`` writes the committed tasks' records a second time, ``--skip`` gives
      the others up.

    Keep ``kafka.transaction.timeout.ms`` above batch time plus the longest restart time (at most
    the brokers' ``transaction.max.timeout.ms``, checked at query start).
    """
    record = log.read(batch_id)
    if record is None:
        raise CommitLogError(f"batch {batch_id} has no commit record to roll forward")
    check_participant(record, participant, log)
    logger.info(
        "batch %d was decided but not finished: rolling %d item(s) forward",
        batch_id,
        len(record.prepared),
    )
    commit_record(log, participant, record, partial_point)
    log.mark_done(batch_id)


def recover(log: CommitLog, participant: Participant) -> None:
    """Recovery before a batch's tasks run (Spark's planner process, see
    :mod:`unaligned.sink.two_phase_commit`).

    3a. Roll forward every batch that has a commit record but is not done.
    3b. Abort whatever no commit record names: fence every open transactional id of the sink's
        prefix / remove every staging directory. No task of this query runs now, so nothing
        open can belong to a batch still in progress.
    """
    for batch_id in log.unfinished_batch_ids():
        roll_forward(log, participant, batch_id, CrashPoint.RECOVERY)
    aborted = participant.clean_up(log, None)
    if aborted:
        logger.info("recovery: aborted %d leftover(s) no commit record names", aborted)
    crash_points.reach(CrashPoint.RECOVERY)
