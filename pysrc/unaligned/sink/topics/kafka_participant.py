"""The Kafka participant of the two-phase-commit sink: one transaction per task attempt.

Input columns and their types: :mod:`unaligned.sink.topics.kafka_columns`; the participant
contract: :mod:`unaligned.sink.participant`. A task attempt writes into a transaction on an id
of the query's pool ``<stem>-<task>-<slot>`` that no other live attempt can claim
(:mod:`unaligned.sink.topics.kafka_id_pool`, which also says why no other query's id matches)
through a :class:`~unaligned.sink.topics.kafka_task_writer.KafkaTaskWriter` (imported by task
workers only); items of commit records: :mod:`unaligned.sink.topics.kafka_items`. The driver checks
every prepared transaction can still commit, commits by handle
(:mod:`unaligned.kafka.transactions.transaction_coordinator`) and fences the pool's leftovers,
never another stem's ids (those under its ``transactionalIdPrefix`` are named in one warning at
recovery); a refused commit says what ended the transaction
(:mod:`unaligned.sink.topics.kafka_refusals`). A prepared transaction must be committed within
``kafka.transaction.timeout.ms`` of its first record (ARCHITECTURE.md, "The two-phase commit";
:func:`unaligned.sink.recovery.roll_forward` for a restart that comes later).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from kafka.errors import KafkaError

from unaligned._util import crash_points
from unaligned._util.crash_points import FailPoint
from unaligned.errors import (
    InjectedFailureError,
    TransactionAbortError,
    TransactionCommitError,
    TransactionExpiredError,
    UnalignedError,
)
from unaligned.kafka.clients.producer_options import TWO_PHASE_COMMIT_KWARG
from unaligned.kafka.transactions import transaction_coordinator, transaction_states
from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.topics import kafka_id_pool, kafka_refusals
from unaligned.sink.topics.kafka_checks import check_cluster
from unaligned.sink.topics.kafka_columns import KafkaColumns
from unaligned.sink.topics.kafka_items import prepared_from_json

if TYPE_CHECKING:
    from unaligned.sink.topics.kafka_task_writer import KafkaTaskWriter

logger = logging.getLogger(__name__)

PARTICIPANT = "kafka"
#: Time kept in hand to commit a prepared transaction before the broker would abort it.
COMMIT_MARGIN_MIN_MS = 5_000

# --- driver side -------------------------------------------------------------------------------


class KafkaParticipant:
    """Kafka transactions as 2PC participants. Picklable: holds options only, no clients."""

    kind = PARTICIPANT

    def __init__(self, target: KafkaTarget, columns: KafkaColumns, id_stem: str) -> None:
        self._target = target
        self._columns = columns
        self._stem = id_stem
        self._id_pattern = kafka_id_pool.id_pattern(id_stem)
        self._two_phase_commit = False
        """Resolved by :meth:`check_at_query_start` in Spark's planner, before the writer is
        pickled into the batch's tasks: their transactions take part in two-phase commit."""

    @property
    def id_stem(self) -> str:
        """What every transactional id of the query's pool starts with
        (:func:`~unaligned.sink.topics.kafka_id_pool.id_stem`)."""
        return self._stem

    def client_kwargs(self) -> dict[str, Any]:
        """The ``KafkaProducer`` kwargs of the sink, in this process.

        Without ``kafka.client.id`` the client id is ``producer-<id stem>-<process id>``: a Spark
        Python worker runs one task at a time and keeps its connections for the next
        (:mod:`unaligned.kafka.produce.produce_session`), so broker quotas and client metrics
        keyed by client id apply per running task, as with one producer per task.
        """
        kwargs = self._target.client_kwargs()
        kwargs.setdefault("client_id", f"producer-{self._stem}-{os.getpid()}")
        if self._two_phase_commit:
            kwargs[TWO_PHASE_COMMIT_KWARG] = True
        return kwargs

    def transactional_id(self, partition_id: int, slot: int) -> str:
        """The id of ``slot`` in ``partition_id``'s part of the pool."""
        return f"{self._stem}-{partition_id}-{slot}"

    def owns(self, transactional_id: str) -> bool:
        """True exactly for an id of this query's pool (``<stem>-<task>-<slot>``)."""
        return self._id_pattern.fullmatch(transactional_id) is not None

    def describe(self, item: Mapping[str, Any]) -> str:
        return prepared_from_json(item).describe()

    def item_key(self, item: Mapping[str, Any]) -> str:
        return str(item["transactionalId"])

    # Step 3 precondition, at query start (before every batch's tasks, see stream_writer_factory).
    def check_at_query_start(self) -> None:
        """The cluster checks of :func:`unaligned.sink.topics.kafka_checks.check_cluster`; they also
        say whether this batch's transactions take part in two-phase commit (KIP-939). Its probe
        id and the ACLs it names are the user's prefix (what a prefixed ACL is granted on), or
        the default stem."""
        prefix = self._target.transactional_id_prefix or self._stem
        self._two_phase_commit = check_cluster(self._target, self.client_kwargs(), prefix)

    def warm_up(self) -> None:
        """Step 1b's warm-up: :func:`unaligned.sink.topics.kafka_task_writer.warm_up`."""
        from unaligned.sink.topics import kafka_task_writer  # task workers only

        kafka_task_writer.warm_up(self.client_kwargs())

    def open_task(self, batch_id: int, partition_id: int, attempt_number: int) -> KafkaTaskWriter:
        """1. Pre-commit starts: claim the first free id of the attempt's lane of the pool
        (:mod:`unaligned.sink.topics.kafka_id_pool`), ``InitProducerId`` on it, begin."""
        kwargs = self.client_kwargs()
        lane = kafka_id_pool.lane(batch_id, attempt_number)
        tid = kafka_id_pool.free_id(kwargs, partial(self.transactional_id, partition_id), lane)
        from unaligned.sink.topics.kafka_task_writer import KafkaTaskWriter  # task workers only

        writer = KafkaTaskWriter(self._target, self._columns, kwargs, tid, partition_id)
        writer.begin()
        try:  # a test's attempt that dies holding a claimed id, nothing written
            crash_points.fail_first_attempt(FailPoint.TASK_AFTER_CLAIM, batch_id, attempt_number)
        except InjectedFailureError:
            writer.close()
            raise
        return writer

    # 2. Decide: only with transactions that can still commit.
    def consolidate(
        self, items: Sequence[Mapping[str, Any]], batch_id: int
    ) -> list[Mapping[str, Any]]:
        """Transactions are committed as the tasks prepared them."""
        return list(items)

    def check_decidable(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Refuse to decide ``batch_id`` if any prepared transaction can no longer commit.

        Raises :class:`TransactionExpiredError` naming each such transaction and what to do,
        after aborting every item (nothing of the batch becomes visible; the batch runs again
        when the query restarts).
        """
        prepared = [prepared_from_json(item) for item in items]
        kwargs = self.client_kwargs()
        states = transaction_states.describe_transactions(
            kwargs, [p.transactional_id for p in prepared if p.record_count]
        )
        margin_ms = max(COMMIT_MARGIN_MIN_MS, self._target.transaction_timeout_ms // 10)
        blockers = transaction_states.commit_blockers(
            prepared, states, int(time.time() * 1000), margin_ms
        )
        if not blockers:
            return
        self.abort(items, batch_id)
        fenced = [
            p for p in prepared if transaction_states.fenced(p, states.get(p.transactional_id))
        ]
        advice = (
            " Another attempt of the same task (a retried stage's, or a zombie's) took the "
            "transactional id and fenced the prepared transaction: restart the query."
            if fenced
            else ""
        )
        if len(fenced) < len(blockers):
            advice += (
                " If the batch took longer than the transaction timeout, raise "
                "kafka.transaction.timeout.ms (up to the brokers' transaction.max.timeout.ms) or "
                "make batches smaller (maxOffsetsPerTrigger, or alignedCheckpointTimeout with "
                "checkpointMode=unaligned)."
            )
        raise TransactionExpiredError(
            f"batch {batch_id} was not decided: {len(blockers)} of its prepared transaction(s) "
            f"can no longer commit on {self._target.bootstrap_servers}: "
            + "; ".join(blockers)
            + ". Nothing of the batch was written; it runs again when the query restarts."
            + advice
        )

    def commit(
        self,
        items: Sequence[Mapping[str, Any]],
        batch_id: int,
        progress: Callable[[int], None],
    ) -> None:
        """Commit every prepared transaction of a decided batch (idempotent).

        The first transaction is committed alone, then the rest over one connection, calling
        ``progress(n)`` after each step. On a refusal every remaining transaction is still
        tried (the decision is made: commit as much as possible), then one
        :class:`TransactionCommitError` lists which were committed and which were refused.
        """
        prepared = [prepared_from_json(item) for item in items]
        kwargs = self.client_kwargs()
        try:
            if prepared:
                transaction_coordinator.commit_all_prepared(kwargs, prepared[:1])
                progress(1)
            if len(prepared) > 1:
                transaction_coordinator.commit_all_prepared(kwargs, prepared[1:])
                progress(len(prepared))
        except TransactionCommitError:
            self._commit_each_and_report(kwargs, prepared, batch_id)

    def _commit_each_and_report(
        self, kwargs: Mapping[str, Any], prepared: Sequence[PreparedTransaction], batch_id: int
    ) -> None:
        committed: list[str] = []
        refused: list[tuple[PreparedTransaction, TransactionCommitError]] = []
        for p in prepared:
            try:
                transaction_coordinator.commit_prepared(kwargs, p)
                committed.append(p.transactional_id)
            except TransactionCommitError as exc:
                refused.append((p, exc))
        try:
            now = transaction_states.describe_transactions(
                kwargs, [p.transactional_id for p, _ in refused]
            )
            endings = [
                kafka_refusals.transaction_ending(p, now.get(p.transactional_id))
                for p, _ in refused
            ]
        except (KafkaError, UnalignedError) as exc:
            endings = [f"its coordinator could not be asked what ended it ({exc!r})"] * len(refused)
        raise TransactionCommitError(
            f"batch {batch_id} was decided (commit record written) but the broker on "
            f"{self._target.bootstrap_servers} refused {len(refused)} of {len(prepared)} "
            f"transaction(s); committed: {', '.join(committed) or 'none'}; refused: "
            + "; ".join(
                f"{exc} ({ending})" for (_, exc), ending in zip(refused, endings, strict=True)
            )
            + ". "
            + kafka_refusals.way_out(batch_id)
        )

    def finish_batch(self, record: CommitRecord) -> None:
        """Nothing beyond the commits: Kafka's transaction markers are the visibility switch."""

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Abort prepared transactions of an undecided batch; failures only logged (cleanup
        fences)."""
        kwargs = self.client_kwargs()
        for item in items:
            prepared = prepared_from_json(item)
            try:
                transaction_coordinator.abort_prepared(kwargs, prepared)
            except TransactionAbortError as exc:
                logger.warning(
                    "batch %d: could not abort %s: %s", batch_id, prepared.describe(), exc
                )

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        """Fence every open transaction of this sink that no commit record still needs.

        Runs after a batch's commit (``up_to_batch``: that batch) and in recovery (``None``),
        when no task of the query runs, so every open transaction of the pool is a leftover:
        a failed, denied or zombie attempt's. The transactions of the batch just committed (the
        coordinator may list them as open for a moment) and of decided but unfinished batches
        are kept. A failed listing (a broker away) is logged and skipped: clean-up keeps read
        _committed consumers moving, it is not needed for exactly-once, and the next batch
        tries again. The leftovers are fenced at once
        (:func:`~unaligned.kafka.transactions.transaction_coordinator.fence_all`). Returns how many
        ids were fenced.
        """
        kwargs = self.client_kwargs()
        try:
            open_ids = transaction_states.list_transactional_ids(kwargs, self._stem)
        except (KafkaError, UnalignedError) as exc:
            logger.warning("clean-up skipped: listing open transactions failed: %r", exc)
            return 0
        candidates = [tid for tid in open_ids if self.owns(tid)]
        if up_to_batch is None:
            self._name_others(kwargs)
        if not candidates:
            return 0
        keep = set(log.unfinished_batch_ids())
        if up_to_batch is not None:
            keep.add(up_to_batch)
        named = {self.item_key(item) for r in log.records(sorted(keep)) for item in r.prepared}
        leftovers = [tid for tid in candidates if tid not in named]
        for tid in leftovers:
            logger.info("aborting open transaction %r that no commit record names", tid)
        transaction_coordinator.fence_all(kwargs, leftovers)
        return len(leftovers)

    def _name_others(self, kwargs: Mapping[str, Any]) -> None:
        """At recovery: one warning naming open transactions under the user's
        ``transactionalIdPrefix`` that are not this query's (another query's, or ids of this
        project from before stems had owners). They are never touched here."""
        prefix = self._target.transactional_id_prefix
        if prefix is None:
            return
        try:
            open_ids = transaction_states.list_transactional_ids(kwargs, prefix)
        except (KafkaError, UnalignedError) as exc:
            logger.debug("listing the transactions under prefix %r failed: %r", prefix, exc)
            return
        others = [tid for tid in open_ids if not self.owns(tid)]
        if others:
            logger.warning(
                "%d open transaction(s) under transactionalIdPrefix %r are not this query's "
                "(its ids start with %r) and are left alone: %s. They belong to another query "
                "using the same prefix, or were left by a version of this sink before ids had "
                "owners. Give each query its own prefix; 'unaligned inspect' and 'unaligned "
                "abandon' on the other query's checkpoint end what it holds",
                len(others),
                prefix,
                self._stem,
                ", ".join(others[:5]) + (", ..." if len(others) > 5 else ""),
            )
