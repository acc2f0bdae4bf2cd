"""The contract between the two-phase-commit core and its participants.

A *participant* is a sink target that can prepare work in tasks and commit it later on the
driver: Kafka transactions (:class:`unaligned.sink.topics.kafka_participant.KafkaParticipant`) or
staged Parquet files (:class:`unaligned.sink.files.file_participant.FileParticipant`). Both
implement :class:`Participant` structurally; neither imports the core.

Where the protocol steps use this contract:

- Step 1, pre-commit (:meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.write`): a task
  warms its process up (:meth:`Participant.warm_up`) while its first rows are on their way,
  opens a :class:`TaskWriter` with its first row, writes chunks, prepares, and returns a
  :class:`SinkCommitMessage` to the driver.
- Step 2, decide and commit (:meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.commit`,
  with :mod:`unaligned.sink.recovery`): the driver turns the messages into a commit record's
  items (:meth:`Participant.consolidate`, :meth:`Participant.check_decidable`), then calls
  :meth:`Participant.commit` and :meth:`Participant.finish_batch`.
- Step 3, recovery (:func:`unaligned.sink.recovery.recover`): roll forward, then
  :meth:`Participant.clean_up`.
- Step 4, abort (:meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.abort`):
  :meth:`Participant.abort` and :meth:`Participant.clean_up`.

A prepared *item* is the JSON-serialisable mapping :meth:`TaskWriter.prepare` returns; commit
records store items verbatim, so a later run (another process, after a crash) can commit them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from unaligned.channel_state.refs import ChannelStateRef
from unaligned.sink.commit_log import CommitLog, CommitRecord


class TaskWriter(Protocol):
    """One task attempt's prepared work (a transaction, a staging file).

    Opened by :meth:`Participant.open_task` with the task's first row, so an empty task opens
    nothing. Nothing written here is visible to readers before the driver commits it.
    """

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        """Add one chunk of the task's rows to the prepared work."""
        ...

    def between_chunks(self) -> None:
        """Called after every chunk: bound what is buffered or in flight."""
        ...

    def prepare(self) -> dict[str, Any]:
        """Flush everything and describe the prepared work as an item.

        The item is JSON-serialisable and carries the task's ``partition`` (the driver orders a
        record's items by it).
        """
        ...

    def abort(self) -> None:
        """Discard the prepared work after a failed write (before :meth:`close`)."""
        ...

    def close(self) -> None:
        """Release clients and files; called once, after :meth:`prepare` or :meth:`abort`."""
        ...


class Participant(Protocol):
    """What the protocol needs from a target. Must be picklable (it travels to tasks)."""

    kind: str
    """Written into every commit record; a checkpoint's records must all name this kind."""

    def check_at_query_start(self) -> None:
        """Refuse a bad target in Spark's planner, before recovery and before any task runs."""
        ...

    def warm_up(self) -> None:
        """Make this process ready to open a task (imports, kept connections) without asking
        or changing anything of the target's state. Runs on a thread of its own while a task's
        first rows are on their way (step 1b); idempotent, and cheap once the process is warm."""
        ...

    def open_task(self, batch_id: int, partition_id: int, attempt_number: int) -> TaskWriter:
        """Begin one task attempt's transaction / staging file (unique per attempt)."""
        ...

    def commit(
        self, items: Sequence[Mapping[str, Any]], batch_id: int, progress: Callable[[int], None]
    ) -> None:
        """Commit every item of a decided batch, calling ``progress(n)`` after ``n`` are done.

        Idempotent: an item already committed (an earlier run rolled it forward) commits again
        with success. An item that can no longer be committed raises a specific error naming it.
        """
        ...

    def consolidate(
        self, items: Sequence[Mapping[str, Any]], batch_id: int
    ) -> list[Mapping[str, Any]]:
        """Step 2b, before the decision: the items the commit record will name, made from the
        tasks' items (the file sink may merge a small batch's staged files into one; nothing
        made here is visible before the decision). Kafka: the items as they are."""
        ...

    def check_decidable(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Step 2, before the decision: raise (after aborting ``items``) if any item could no
        longer be committed, so a batch is never decided with work that cannot commit."""
        ...

    def finish_batch(self, record: CommitRecord) -> None:
        """After every item is committed: make the batch visible if the commits alone do not
        (idempotent; runs again on every roll-forward)."""
        ...

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Abort items no commit record names: of an undecided batch, or prepared by an attempt
        its batch was decided without (on the driver, or in that attempt's own task: step 1d of
        :meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.write`)."""
        ...

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        """Abort or remove what no commit record names, of batches <= ``up_to_batch``.

        ``None``: every batch (recovery, when no task of the query runs). What a decided but
        unfinished batch still needs for its roll-forward is kept. Returns how many leftovers
        were aborted or removed.
        """
        ...

    def describe(self, item: Mapping[str, Any]) -> str:
        """The item for a human: in log lines and error messages."""
        ...

    def item_key(self, item: Mapping[str, Any]) -> str:
        """The item's identity (transactional id, staged path): what tells a new message's
        item apart from the items a commit record names."""
        ...


class TaskOutcome(enum.Enum):
    """What a task attempt did in step 1."""

    PREPARED = "prepared"
    """Wrote rows and prepared one item."""
    EMPTY = "empty"
    """Had no row to write; opened nothing."""
    ALREADY_DECIDED = "already_decided"
    """Found a commit record for its batch (a replay after a crash); consumed its input, opened
    nothing."""


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one task attempt prepared; ``prepared`` is set only for ``PREPARED``.

    Spark pickles it from the task to the driver: every field is picklable (the refs are
    frozen dataclasses)."""

    batch_id: int
    partition_id: int
    attempt_number: int
    rows: int
    outcome: TaskOutcome
    prepared: Mapping[str, Any] | None
    pending: tuple[ChannelStateRef, ...] = ()
    """Channel state this task index leaves for the next barrier, oldest first."""
    stats: Mapping[str, Any] | None = None
    """:class:`unaligned.barriers.metrics.TaskBarrierStats` as a dict."""
