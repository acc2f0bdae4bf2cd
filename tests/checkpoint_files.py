"""Synthetic checkpoints for the inspection tests: Spark's files as Spark 4.3 writes them, and
the sink's files written through the sink's own code (commit log, metrics, finishing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unaligned.barriers.metrics import BarrierMetrics, write_metrics
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState, InlineChannelState
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog, CommitRecord

QUERY_ID = "5e0c1d2a-1111-2222-3333-444455556666"
TOKEN = "tok42"
BASE_MS = 1_700_000_000_000


def new_checkpoint(root: Path, query_id: str = QUERY_ID) -> Path:
    """``metadata`` and empty ``offsets/`` and ``commits/``, as Spark leaves them at start."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return root


def source_offset(
    positions: Mapping[int, int],
    *,
    topic: str = "in",
    ending: Mapping[int, int] | None = None,
    token: str = TOKEN,
    drained: bool = False,
) -> dict[str, Any]:
    """A ``format("unaligned")`` source offset as the source writes it (``finished`` and
    ``endOfData`` derived the way ``KafkaSourceOffset.to_json`` derives them)."""
    offset: dict[str, Any] = {
        "offsets": {topic: {str(p): o for p, o in positions.items()}},
        "idleBarrier": 0,
        "barrierToken": token,
    }
    if ending is not None:
        offset["ending"] = {topic: {str(p): o for p, o in ending.items()}}
        finished = [p for p, end in ending.items() if positions.get(p, end) >= end]
        offset["finished"] = {topic: finished} if finished else {}
        if len(finished) == len(ending):
            offset["endOfData"] = True
        if drained:
            offset["drained"] = True
    return offset


def plan(root: Path, batch: int, sources: Sequence[Any], start_ms: int | None = None) -> None:
    """``offsets/<batch>`` (v1): Spark plans the batch."""
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": start_ms or BASE_MS + batch * 1000}
    lines = ["v1", json.dumps(metadata)] + ["-" if s is None else json.dumps(s) for s in sources]
    (root / "offsets" / str(batch)).write_text("\n".join(lines))


def spark_commit(root: Path, batch: int) -> None:
    """``commits/<batch>``: Spark finished the batch."""
    (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def metrics(batch: int, **fields: Any) -> BarrierMetrics:
    values: dict[str, Any] = {
        "batch_id": batch,
        "start_delay_ms": 40,
        "duration_ms": 1200,
        "mode": "aligned",
        "tasks": 2,
        "tasks_cut": 0,
        "rows_written": 100,
        "rows_replayed": 0,
        "rows_carried": 0,
        "rows_spilled": 0,
        "bytes_spilled": 0,
        "channel_state_files": 0,
        "channel_state_bytes": 0,
        "inlined_bytes": 0,
    }
    values.update(fields)
    return BarrierMetrics(**values)


def store_metrics(root: Path, m: BarrierMetrics) -> None:
    write_metrics(Checkpoint.resolve(str(root)), m)


def file_ref(barrier: int, task: int, rows: int, size: int, start_row: int = 0) -> ChannelStateRef:
    return FileChannelState(
        barrier_id=barrier,
        task_index=task,
        query_id=QUERY_ID,
        write_id="w",
        row_count=rows,
        byte_size=size,
        crc32=0,
        start_row=start_row,
        path=f"/state/barrier-{barrier}/task-{task}.avro",
        uri=None,
    )


def inline_ref(barrier: int, task: int, rows: int, size: int) -> ChannelStateRef:
    return InlineChannelState(
        barrier_id=barrier,
        task_index=task,
        query_id=QUERY_ID,
        write_id="w",
        row_count=rows,
        byte_size=size,
        crc32=0,
        inline_avro=b"x" * size,
    )


def kafka_item(tid: str, records: int = 10) -> dict[str, Any]:
    """A prepared transaction as the Kafka participant writes it in a commit record."""
    return {"transactionalId": tid, "producerId": 7, "epoch": 0, "recordCount": records}


def decide(
    root: Path,
    batch: int,
    *,
    prepared: Sequence[Mapping[str, Any]] = (),
    channel_state: Mapping[int, Sequence[ChannelStateRef]] | None = None,
    done: bool = True,
    participant: str = "kafka",
) -> None:
    """The sink's commit record for ``batch`` (and its done marker unless ``done=False``)."""
    log = CommitLog(Checkpoint.resolve(str(root)))
    record = CommitRecord(
        batch_id=batch,
        participant=participant,
        prepared=tuple(prepared),
        decided_at_ms=BASE_MS + batch * 1000 + 900,
        channel_state={i: tuple(refs) for i, refs in (channel_state or {}).items()},
    )
    assert log.write(record)
    if done:
        log.mark_done(batch)
