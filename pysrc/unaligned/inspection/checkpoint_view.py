"""Collect what a checkpoint says about its query into a :class:`~.model.CheckpointView`.

Everything is read from the checkpoint (any ``pyarrow.fs`` location) and nothing is written:

- Spark's ``offsets/<N>`` (batch start, the sources' offsets) and ``commits/<N>``;
- the sink's commit records and done markers (:class:`~unaligned.sink.commit_log.CommitLog`),
  barrier metrics (:mod:`unaligned.barriers.metrics`), ``finished.json`` and ``stop.json``;
- a table sink's ``table-target.json``, and then the table itself (:mod:`.table_state`).

Only the open transactions need the broker, and only when the caller passes its bootstrap
servers: the sink's Kafka options are not stored in the checkpoint
(:mod:`.broker_transactions`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from unaligned._util.fs import read_bytes
from unaligned.barriers.metrics import BarrierMetrics, read_metrics
from unaligned.barriers.offset_log import OffsetLogEntry, read_offset_log
from unaligned.channel_state.refs import InlineChannelState
from unaligned.checkpoint import QUERY_METADATA_FILE, STATE_DIR, Checkpoint
from unaligned.errors import BarrierError, CommitLogError, NotACheckpointError
from unaligned.finishing.final_checkpoint import has_finished
from unaligned.finishing.stop_request import read_request
from unaligned.inspection.model import (
    BarrierView,
    CheckpointView,
    FinishedView,
    InDoubtBatch,
    OpenTransactions,
    PendingChannelState,
    PendingTaskState,
    SinkStatus,
    SourceView,
    SparkStatus,
    StopView,
)
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix, id_stem, stem_of
from unaligned.source.offsets import KafkaSourceOffset

_TOKEN_KEY = "barrierToken"


def build_view(
    checkpoint: Checkpoint,
    *,
    kafka_client: Mapping[str, Any] | None = None,
    transactional_id_prefix: str | None = None,
) -> CheckpointView:
    """Everything ``unaligned inspect`` shows of ``checkpoint``.

    ``kafka_client``: kafka-python kwargs of the sink's cluster; then also ask it which
    transactions under the query's transactional-id prefix are open (``transactional_id_prefix``
    if given, else the stem of the ids in the commit records, else the sink's default
    ``unaligned-<query id>``) and what a restart does with each in-doubt batch.

    Raises :class:`~unaligned.errors.NotACheckpointError` for a path that is not the
    checkpoint of a query with a ``format("unaligned")`` source or sink.
    """
    query_id = _check_checkpoint(checkpoint)
    log = CommitLog(checkpoint)
    entries = {b: read_offset_log(checkpoint, b) for b in checkpoint.logged_batches()}
    in_doubt = tuple(_in_doubt(record) for record in log.records(log.unfinished_batch_ids()))
    decided = log.decided_batch_ids()
    newest = log.read(decided[-1]) if decided else None
    open_transactions = None
    if kafka_client is not None:
        from unaligned.inspection import broker_transactions

        prefix, stem, prefix_from = _prefix(query_id, transactional_id_prefix, in_doubt, newest)
        transactions = broker_transactions.open_transactions(kafka_client, prefix, stem, in_doubt)
        open_transactions = OpenTransactions(prefix, prefix_from, transactions, stem)
        in_doubt = broker_transactions.with_outcomes(kafka_client, log, in_doubt)
    last = max(entries) if entries else None
    from unaligned.inspection.table_state import table_view

    table_target, in_doubt = table_view(checkpoint, query_id, in_doubt)
    return CheckpointView(
        checkpoint=checkpoint.location,
        query_id=query_id,
        barriers=_barriers(checkpoint, log, entries),
        in_doubt=in_doubt,
        open_transactions=open_transactions,
        sources=() if last is None else _sources(last, entries[last]),
        pending=None if newest is None else _pending(newest),
        finished=_finished(checkpoint),
        stop_request=_stop(checkpoint),
        abandoned=tuple(note for _, note in sorted(log.abandoned_notes().items())),
        table_target=table_target,
    )


def _check_checkpoint(checkpoint: Checkpoint) -> str:
    """The query id; NotACheckpointError naming the path and what is missing."""
    name = checkpoint.location
    if not checkpoint.exists():
        raise NotACheckpointError(
            f"{name} does not exist (a query that failed as it started, before "
            "its first batch, may leave none: its error is in the driver's log)"
        )
    if not checkpoint.has_metadata():
        raise NotACheckpointError(
            f"{name} is not a streaming query's checkpoint: it has no "
            f"'{QUERY_METADATA_FILE}' file (pass the query's checkpointLocation)"
        )
    try:
        query_id = checkpoint.query_id()
    except BarrierError as exc:
        raise NotACheckpointError(f"{name} is not a checkpoint: {exc}") from exc
    offsets = checkpoint.logged_batches()
    if not offsets or checkpoint.has_state_dir():
        return query_id
    if not _tokens(read_offset_log(checkpoint, offsets[-1])):
        raise NotACheckpointError(
            f'{name} is not the checkpoint of a format("unaligned") query: the '
            f"offsets of its batch {offsets[-1]} carry no {_TOKEN_KEY} and it has no "
            f"'{STATE_DIR}/' directory"
        )
    return query_id


def _tokens(entry: OffsetLogEntry) -> list[str]:
    return [
        s.offset[_TOKEN_KEY]
        for s in entry.sources
        if isinstance(s.offset, dict) and isinstance(s.offset.get(_TOKEN_KEY), str)
    ]


# --- barriers ----------------------------------------------------------------------------------


def _barriers(
    checkpoint: Checkpoint, log: CommitLog, entries: dict[int, OffsetLogEntry]
) -> tuple[BarrierView, ...]:
    metrics = {m.batch_id: m for m in read_metrics(checkpoint)}
    spark_commits = set(checkpoint.spark_committed_batches())
    decided, done = set(log.decided_batch_ids()), sorted(log.done_batch_ids())
    batch_ids = sorted(set(entries) | spark_commits | set(metrics) | decided | set(done))
    views = []
    for batch_id in batch_ids:
        sink: SinkStatus
        if batch_id in done:
            sink = "done"
        elif batch_id in decided:
            sink = "in-doubt"
        elif done and batch_id < done[0]:
            sink = "pruned"
        else:
            sink = "undecided"
        spark: SparkStatus
        if batch_id in spark_commits:
            spark = "committed"
        elif batch_id in entries:
            spark = "planned"
        else:
            spark = "pruned"
        entry = entries.get(batch_id)
        start_ms = None if entry is None else entry.batch_timestamp_ms
        views.append(_barrier(batch_id, start_ms, metrics.get(batch_id), sink, spark))
    return tuple(views)


def _barrier(
    batch_id: int,
    start_ms: int | None,
    m: BarrierMetrics | None,
    sink: SinkStatus,
    spark: SparkStatus,
) -> BarrierView:
    if m is None:
        return BarrierView(batch_id, sink, spark, start_ms)
    return BarrierView(
        batch_id=batch_id,
        start_ms=start_ms,
        duration_ms=m.duration_ms,
        start_delay_ms=m.start_delay_ms,
        mode=m.mode,
        tasks=m.tasks,
        tasks_cut=m.tasks_cut,
        rows_written=m.rows_written,
        rows_spilled=m.rows_spilled,
        rows_replayed=m.rows_replayed,
        rows_carried=m.rows_carried,
        channel_state_files=m.channel_state_files,
        channel_state_bytes=m.channel_state_bytes,
        inlined_bytes=m.inlined_bytes,
        sink=sink,
        spark=spark,
    )


# --- the sink's decisions ----------------------------------------------------------------------


def _transactional_ids(record: CommitRecord) -> tuple[str, ...]:
    return tuple(
        str(item["transactionalId"]) for item in record.prepared if "transactionalId" in item
    )


def _in_doubt(record: CommitRecord) -> InDoubtBatch:
    return InDoubtBatch(
        batch_id=record.batch_id,
        participant=record.participant,
        decided_at_ms=record.decided_at_ms,
        prepared_items=len(record.prepared),
        transactional_ids=_transactional_ids(record),
        two_phase_commit=any(bool(item.get("twoPhaseCommit")) for item in record.prepared),
    )


def _prefix(
    query_id: str,
    given: str | None,
    in_doubt: Sequence[InDoubtBatch],
    newest: CommitRecord | None,
) -> tuple[str, str, Literal["option", "commit record", "default"]]:
    """The transactional-id prefix to list and the query's own stem: the given prefix (and its
    stem for this query), else the stem of the ids in the commit records, else the default."""
    if given is not None:
        return given, id_stem(given, query_id), "option"
    ids = [t for b in in_doubt for t in b.transactional_ids]
    if newest is not None:
        ids += _transactional_ids(newest)
    for tid in ids:
        stem = stem_of(tid)
        if stem is not None:
            return stem, stem, "commit record"
    default = default_transactional_id_prefix(query_id)
    return default, default, "default"


def _pending(record: CommitRecord) -> PendingChannelState:
    tasks = []
    for index, refs in sorted(record.channel_state.items()):
        inline = sum(1 for ref in refs if isinstance(ref, InlineChannelState))
        tasks.append(
            PendingTaskState(
                task_index=index,
                rows=sum(ref.remaining_rows for ref in refs),
                files=len(refs) - inline,
                inline=inline,
                bytes=sum(ref.byte_size for ref in refs),
                barriers=tuple(sorted({ref.barrier_id for ref in refs})),
            )
        )
    return PendingChannelState(record.batch_id, tuple(tasks))


# --- sources, finishing ------------------------------------------------------------------------


def _by_topic(positions: dict[TopicPartitionId, int]) -> dict[str, dict[int, int]]:
    result: dict[str, dict[int, int]] = {}
    for tp, offset in positions.items():
        result.setdefault(tp.topic, {})[tp.partition] = offset
    return result


def _sources(batch_id: int, entry: OffsetLogEntry) -> tuple[SourceView, ...]:
    views = []
    for logged in entry.sources:
        if not (isinstance(logged.offset, dict) and _TOKEN_KEY in logged.offset):
            continue
        offset = KafkaSourceOffset.from_json(
            logged.offset, f"offset of source {logged.source_id} in batch {batch_id}"
        )
        finished: dict[str, list[int]] = {}
        for tp in sorted(offset.finished()):
            finished.setdefault(tp.topic, []).append(tp.partition)
        views.append(
            SourceView(
                source_id=logged.source_id,
                batch_id=batch_id,
                barrier_token=offset.barrier_token,
                positions=_by_topic(dict(offset.positions)),
                ending=None if offset.ending is None else _by_topic(dict(offset.ending)),
                finished={topic: tuple(ps) for topic, ps in finished.items()},
                end_of_data=offset.end_of_data(),
                drained=offset.drained,
                read_tasks=offset.read_tasks,
                layout_drain=offset.layout_drain,
            )
        )
    return tuple(views)


def _finished(checkpoint: Checkpoint) -> FinishedView | None:
    location = checkpoint.finished_marker
    data = read_bytes(location)
    if data is None:
        return None
    try:
        document = json.loads(data)
        finished_at = document.get("finishedAtMs")
        final_batch_id = int(document["finalBatchId"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CommitLogError(f"{location.uri or location.path} is unreadable: {exc!r}") from exc
    return FinishedView(
        final_batch_id=final_batch_id,
        finished_at_ms=None if finished_at is None else int(finished_at),
        has_finished=has_finished(checkpoint),
    )


def _stop(checkpoint: Checkpoint) -> StopView | None:
    request = read_request(checkpoint)
    if request is None:
        return None
    return StopView(
        drain=request.drain,
        requested_at_ms=request.requested_at_ms,
        honoured_by=request.honoured_by,
        honoured_at_ms=request.honoured_at_ms,
        completed_batch_id=request.completed_batch,
    )
