"""What ``unaligned inspect`` shows of a checkpoint: frozen dataclasses, and their JSON.

:func:`unaligned.inspection.checkpoint_view.build_view` collects the facts; :mod:`.text` and
:mod:`.html_report` render them. :meth:`CheckpointView.to_dict` is the document ``unaligned
inspect --json`` prints; its keys are stable (a new key may be added, none is renamed or
removed), times are epoch milliseconds, sizes bytes, ``null`` means "not known". Every key:
ARCHITECTURE.md, "Module notes", ``inspection/model.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

SinkStatus = Literal["done", "in-doubt", "undecided", "pruned"]
"""The sink's side of a batch: ``done`` (done marker), ``in-doubt`` (commit record, no done
marker: a restart rolls it forward), ``undecided`` (no record: the batch runs again) or
``pruned`` (no record and older than the oldest kept done marker: only done batches are
pruned)."""

SparkStatus = Literal["committed", "planned", "pruned"]
"""Spark's side: ``committed`` (``<checkpoint>/commits/<N>``), ``planned`` (only in the offset
log) or ``pruned`` (older than everything Spark's logs keep)."""

Positions = Mapping[str, Mapping[int, int]]
"""Offsets per topic, then per partition."""


@dataclass(frozen=True)
class BarrierView:
    """One barrier (micro-batch): its metrics, if any, and whether each side committed it."""

    batch_id: int
    sink: SinkStatus
    spark: SparkStatus
    start_ms: int | None = None
    duration_ms: int | None = None
    start_delay_ms: int | None = None
    mode: Literal["aligned", "unaligned"] | None = None
    tasks: int | None = None
    tasks_cut: int | None = None
    rows_written: int | None = None
    rows_spilled: int | None = None
    rows_replayed: int | None = None
    rows_carried: int | None = None
    channel_state_files: int | None = None
    channel_state_bytes: int | None = None
    inlined_bytes: int | None = None

    @property
    def committed(self) -> bool:
        """Both the sink (done marker, or pruned after it) and Spark committed the batch."""
        return self.sink in ("done", "pruned") and self.spark in ("committed", "pruned")

    @property
    def has_metrics(self) -> bool:
        return self.duration_ms is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "startMs": self.start_ms,
            "durationMs": self.duration_ms,
            "startDelayMs": self.start_delay_ms,
            "mode": self.mode,
            "tasks": self.tasks,
            "tasksCut": self.tasks_cut,
            "rowsWritten": self.rows_written,
            "rowsSpilled": self.rows_spilled,
            "rowsReplayed": self.rows_replayed,
            "rowsCarried": self.rows_carried,
            "channelStateFiles": self.channel_state_files,
            "channelStateBytes": self.channel_state_bytes,
            "inlinedBytes": self.inlined_bytes,
            "sink": self.sink,
            "spark": self.spark,
            "committed": self.committed,
        }


@dataclass(frozen=True)
class InDoubtBatch:
    """A sink batch decided but not done: what its commit record says will be committed."""

    batch_id: int
    participant: str
    decided_at_ms: int
    prepared_items: int
    transactional_ids: tuple[str, ...]
    two_phase_commit: bool = False
    """Its transactions take part in two-phase commit (KIP-939): no broker timeout aborts them."""
    outcome: str | None = None
    """What a restart does with it, from its transactions' state on the broker (``None``: the
    broker was not asked)."""
    blocks_readers: bool = False
    """Held transactions of it keep read_committed readers at the last stable offset."""
    in_table: bool | None = None
    """An Iceberg or Delta batch: whether its table commit landed (read from the table);
    ``None``: not a table batch, or the table could not be read."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "participant": self.participant,
            "decidedAtMs": self.decided_at_ms,
            "preparedItems": self.prepared_items,
            "transactionalIds": list(self.transactional_ids),
            "twoPhaseCommit": self.two_phase_commit,
            "outcome": self.outcome,
            "blocksReaders": self.blocks_readers,
            "inTable": self.in_table,
        }


@dataclass(frozen=True)
class TableTargetView:
    """The Iceberg or Delta table a table sink writes (the checkpoint's record of it) and
    this query's last batch in it, read from the table (``read_error`` when it could not be)."""

    format: str
    table: str
    catalog_name: str | None
    reached_through: str
    data_location: str
    last_batch_id: int | None = None
    snapshot: str | None = None
    """The Iceberg snapshot id or Delta table version holding :attr:`last_batch_id`."""
    read_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "table": self.table,
            "catalogName": self.catalog_name,
            "reachedThrough": self.reached_through,
            "dataLocation": self.data_location,
            "lastBatchId": self.last_batch_id,
            "snapshot": self.snapshot,
            "readError": self.read_error,
        }


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction the broker has open under the query's transactional-id prefix."""

    transactional_id: str
    state: str | None
    producer_id: int | None
    producer_epoch: int | None
    start_ms: int | None
    timeout_ms: int | None
    named_by_batch: int | None
    this_query: bool = True
    """An id of the query's own stem; ``False``: another query's under the same prefix, which
    the sink never touches."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "transactionalId": self.transactional_id,
            "state": self.state,
            "producerId": self.producer_id,
            "producerEpoch": self.producer_epoch,
            "startMs": self.start_ms,
            "timeoutMs": self.timeout_ms,
            "namedByBatch": self.named_by_batch,
            "thisQuery": self.this_query,
        }


@dataclass(frozen=True)
class OpenTransactions:
    """The broker's answer for one prefix; ``prefix_from`` says where the prefix came from,
    ``stem`` what this query's own ids start with."""

    prefix: str
    prefix_from: Literal["option", "commit record", "default"]
    transactions: tuple[OpenTransaction, ...]
    stem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "prefixFrom": self.prefix_from,
            "stem": self.stem,
            "transactions": [t.to_dict() for t in self.transactions],
        }


def positions_dict(positions: Positions) -> dict[str, dict[str, int]]:
    """``{topic: {"partition": offset}}`` with sorted topics and partitions (JSON keys)."""
    return {
        topic: {str(p): positions[topic][p] for p in sorted(positions[topic])}
        for topic in sorted(positions)
    }


@dataclass(frozen=True)
class SourceView:
    """A ``format("unaligned")`` source's offset in the last offset-log entry."""

    source_id: str
    batch_id: int
    barrier_token: str | None
    positions: Positions
    ending: Positions | None
    finished: Mapping[str, tuple[int, ...]]
    end_of_data: bool
    drained: bool
    read_tasks: int | None = None
    """Read tasks of the batch (``None``: one per topic-partition, an earlier version's offset)."""
    layout_drain: bool = False
    """The batch is a layout drain (``docs/guides/rescaling.md``)."""

    @property
    def bounded(self) -> bool:
        return self.ending is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sourceId": self.source_id,
            "batchId": self.batch_id,
            "barrierToken": self.barrier_token,
            "positions": positions_dict(self.positions),
            "ending": None if self.ending is None else positions_dict(self.ending),
            "finished": {t: list(self.finished[t]) for t in sorted(self.finished)},
            "endOfData": self.end_of_data,
            "drained": self.drained,
            "readTasks": self.read_tasks,
            "layoutDrain": self.layout_drain,
        }


@dataclass(frozen=True)
class PendingTaskState:
    """Channel state one sink task inherits: the next barrier's task replays it first."""

    task_index: int
    rows: int
    files: int
    inline: int
    bytes: int
    barriers: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "taskIndex": self.task_index,
            "rows": self.rows,
            "files": self.files,
            "inline": self.inline,
            "bytes": self.bytes,
            "barriers": list(self.barriers),
        }


@dataclass(frozen=True)
class PendingChannelState:
    """Channel state pending after the newest commit record (``batch_id``)."""

    batch_id: int
    tasks: tuple[PendingTaskState, ...]

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        return {"batchId": self.batch_id, "tasks": [t.to_dict() for t in self.tasks]}


@dataclass(frozen=True)
class FinishedView:
    """``unaligned/finished.json``: the final checkpoint committed with nothing pending."""

    final_batch_id: int
    finished_at_ms: int | None
    has_finished: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "finalBatchId": self.final_batch_id,
            "finishedAtMs": self.finished_at_ms,
            "hasFinished": self.has_finished,
        }


@dataclass(frozen=True)
class StopView:
    """``unaligned/stop.json``: a stop request, and how far it got."""

    drain: bool
    requested_at_ms: int
    honoured_by: str | None
    honoured_at_ms: int | None
    completed_batch_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "drain": self.drain,
            "requestedAtMs": self.requested_at_ms,
            "honouredBy": self.honoured_by,
            "honouredAtMs": self.honoured_at_ms,
            "completedBatchId": self.completed_batch_id,
        }


@dataclass(frozen=True)
class CheckpointView:
    """Everything ``unaligned inspect`` shows of one checkpoint (see the module docstring)."""

    checkpoint: str
    query_id: str
    barriers: tuple[BarrierView, ...]
    in_doubt: tuple[InDoubtBatch, ...]
    open_transactions: OpenTransactions | None
    sources: tuple[SourceView, ...]
    pending: PendingChannelState | None
    finished: FinishedView | None
    stop_request: StopView | None
    abandoned: tuple[Mapping[str, Any], ...] = ()
    """What ``unaligned abandon`` did, per batch (its notes: ``batchId``, ``choice``, ``atMs``,
    ``items``), oldest first."""
    table_target: TableTargetView | None = None
    """A table sink's table (``None``: another sink, or no record of it in the checkpoint)."""

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "checkpoint": self.checkpoint,
            "queryId": self.query_id,
            "barriers": [b.to_dict() for b in self.barriers],
            "inDoubt": [b.to_dict() for b in self.in_doubt],
            "openTransactions": (
                None if self.open_transactions is None else self.open_transactions.to_dict()
            ),
            "sources": [s.to_dict() for s in self.sources],
            "pendingChannelState": None if self.pending is None else self.pending.to_dict(),
            "finished": None if self.finished is None else self.finished.to_dict(),
            "stopRequest": None if self.stop_request is None else self.stop_request.to_dict(),
            "abandoned": [dict(note) for note in self.abandoned],
            "tableTarget": None if self.table_target is None else self.table_target.to_dict(),
        }
