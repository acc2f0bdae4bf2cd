"""Per-barrier metrics of the unaligned sink, kept under the checkpoint.

Each sink task returns a :class:`TaskBarrierStats` in its commit message; the driver's commit
combines them with :func:`aggregate` into one :class:`BarrierMetrics` per batch (= barrier)
and stores it with :func:`write_metrics`.

Storage: one small JSON file per barrier, ``<checkpoint>/unaligned/metrics/<batchId>.json``,
written to a temporary name and renamed. Not one appended ``metrics.jsonl``: ``pyarrow.fs``
has no append on every filesystem (S3 has none), and a rewrite of a growing file would not be
atomic. Only the driver's commit writes, once per batch; a commit that runs again for the same
batch after a restart replaces that batch's record (the last commit wins). Readers get every
record in batch order with :func:`read_metrics`, or as JSON lines with :func:`metrics_jsonl`.
Old records can be dropped with :func:`purge_metrics` (like Spark's own logs, the directory
otherwise grows by one small file per batch).

Times are wall-clock epoch milliseconds; ``start_delay_ms`` compares executor clocks with the
driver-fixed batch start, so clock skew between hosts shows up in it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow.fs as pafs

from unaligned._util.fs import Location, read_text
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError

logger = logging.getLogger(__name__)

_RECORD_NAME = re.compile(r"^(\d+)\.json$")

Mode = Literal["aligned", "unaligned"]


@dataclass(frozen=True)
class TaskBarrierStats:
    """What one sink task did at one barrier (returned in its commit message).

    ``rows_written`` counts every row the task wrote to the external system, replayed rows
    included; ``rows_replayed`` is the part of them that came from earlier channel state.
    ``rows_carried`` are rows of earlier channel state the task did not reach before the
    deadline, carried forward by reference (not rewritten); ``rows_merged`` are rows of earlier
    channel state the task rewrote into its new state ahead of the drained input (step 3a of
    :mod:`unaligned.barriers.alignment`: small or many pending files become one).
    ``rows_spilled`` are rows of this batch's input drained into new channel state after the
    cut, ``state_file_bytes`` and ``state_inline_bytes`` the size of that state (at most one of
    them is non-zero).
    """

    task_index: int
    start_ms: int
    cut: bool
    rows_written: int
    rows_replayed: int = 0
    rows_carried: int = 0
    rows_spilled: int = 0
    state_file_bytes: int = 0
    state_inline_bytes: int = 0
    rows_merged: int = 0

    def __post_init__(self) -> None:
        counts = (
            self.rows_written,
            self.rows_replayed,
            self.rows_carried,
            self.rows_spilled,
            self.rows_merged,
            self.state_file_bytes,
            self.state_inline_bytes,
        )
        if any(value < 0 for value in counts):
            raise ValueError(f"task {self.task_index}: negative count in {self}")
        if self.rows_replayed > self.rows_written:
            raise ValueError(f"task {self.task_index}: rows_replayed > rows_written")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> TaskBarrierStats:
        return TaskBarrierStats(**data)


@dataclass(frozen=True)
class BarrierMetrics:
    """One barrier (micro-batch) of the sink.

    ``start_delay_ms``: first task start minus batch start (``None`` when no task ran);
    ``duration_ms``: commit time minus batch start; ``mode``: ``unaligned`` if any task cut,
    else ``aligned``. ``bytes_spilled = channel_state_bytes + inlined_bytes``;
    ``channel_state_files`` counts the files written at this barrier.
    """

    batch_id: int
    start_delay_ms: int | None
    duration_ms: int
    mode: Mode
    tasks: int
    tasks_cut: int
    rows_written: int
    rows_replayed: int
    rows_carried: int
    rows_spilled: int
    bytes_spilled: int
    channel_state_files: int
    channel_state_bytes: int
    inlined_bytes: int
    rows_merged: int = 0
    """Rows of earlier channel state rewritten into this barrier's new state (step 3a)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> BarrierMetrics:
        names = {f.name for f in dataclasses.fields(BarrierMetrics)}
        if not set(data) <= names or names - set(data) - {"rows_merged"}:  # added later
            raise ValueError(f"fields {sorted(set(data) ^ names)} missing or unknown")
        if data["mode"] not in ("aligned", "unaligned"):
            raise ValueError(f"mode {data['mode']!r}")
        return BarrierMetrics(**data)


def aggregate(
    batch_id: int, batch_start_ms: int, commit_ms: int, tasks: Iterable[TaskBarrierStats]
) -> BarrierMetrics:
    """Combine the committed tasks' stats of one batch (one entry per task index)."""
    stats = list(tasks)
    indexes = [s.task_index for s in stats]
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"batch {batch_id}: several stats for one task index in {indexes}")
    file_bytes = sum(s.state_file_bytes for s in stats)
    inline_bytes = sum(s.state_inline_bytes for s in stats)
    tasks_cut = sum(1 for s in stats if s.cut)
    return BarrierMetrics(
        batch_id=batch_id,
        start_delay_ms=min(s.start_ms for s in stats) - batch_start_ms if stats else None,
        duration_ms=commit_ms - batch_start_ms,
        mode="unaligned" if tasks_cut else "aligned",
        tasks=len(stats),
        tasks_cut=tasks_cut,
        rows_written=sum(s.rows_written for s in stats),
        rows_replayed=sum(s.rows_replayed for s in stats),
        rows_carried=sum(s.rows_carried for s in stats),
        rows_spilled=sum(s.rows_spilled for s in stats),
        rows_merged=sum(s.rows_merged for s in stats),
        bytes_spilled=file_bytes + inline_bytes,
        channel_state_files=sum(1 for s in stats if s.state_file_bytes > 0),
        channel_state_bytes=file_bytes,
        inlined_bytes=inline_bytes,
    )


def record_barrier(
    checkpoint: Checkpoint,
    batch_id: int,
    batch_start_ms: int,
    stats: Sequence[TaskBarrierStats],
    commit_ms: int | None = None,
) -> BarrierMetrics | None:
    """Aggregate and store the committed tasks' ``stats`` of barrier ``batch_id`` (the driver,
    once the batch committed); ``None`` and nothing written when no task returned stats."""
    if not stats:
        return None
    now_ms = int(time.time() * 1000) if commit_ms is None else commit_ms
    metrics = aggregate(batch_id, batch_start_ms, now_ms, stats)
    write_metrics(checkpoint, metrics)
    return metrics


def write_metrics(checkpoint: Checkpoint, metrics: BarrierMetrics) -> str:
    """Store ``metrics`` as ``<checkpoint>/unaligned/metrics/<batchId>.json`` (write to a
    temporary name, then rename; replaces an earlier record of the same batch). Returns the
    path written."""
    directory = checkpoint.metrics_dir
    directory.filesystem.create_dir(directory.path, recursive=True)
    final = directory.child(f"{metrics.batch_id}.json")
    temp = directory.child(f"{metrics.batch_id}.json.{uuid.uuid4().hex}.tmp")
    with temp.filesystem.open_output_stream(temp.path) as out:
        out.write((metrics.to_json() + "\n").encode("utf-8"))
    temp.filesystem.move(temp.path, final.path)
    logger.info("barrier metrics of batch %d: %s", metrics.batch_id, metrics.to_json())
    return final.path


def _record_files(directory: Location) -> list[tuple[int, str]]:
    selector = pafs.FileSelector(directory.path, allow_not_found=True)
    found = []
    for info in directory.filesystem.get_file_info(selector):
        match = _RECORD_NAME.match(info.base_name)
        if match and info.type == pafs.FileType.File:
            found.append((int(match.group(1)), info.path))
    return sorted(found)


def read_metrics(checkpoint: Checkpoint) -> list[BarrierMetrics]:
    """Every stored barrier record, by batch id. CommitLogError names a malformed file."""
    directory = checkpoint.metrics_dir
    records = []
    for batch_id, path in _record_files(directory):
        try:
            metrics = BarrierMetrics.from_dict(
                json.loads(read_text(Location(directory.filesystem, path, None)))
            )
        except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
            raise CommitLogError(f"barrier metrics file {path} is malformed: {exc}") from exc
        if metrics.batch_id != batch_id:
            raise CommitLogError(
                f"barrier metrics file {path} holds batch {metrics.batch_id}, not {batch_id}"
            )
        records.append(metrics)
    return records


def metrics_jsonl(checkpoint: Checkpoint) -> str:
    """Every stored barrier record as JSON lines (one object per line, by batch id)."""
    return "".join(m.to_json() + "\n" for m in read_metrics(checkpoint))


def purge_metrics(checkpoint: Checkpoint, before_batch_id: int) -> int:
    """Delete the records of batches ``< before_batch_id``; returns how many were removed."""
    directory = checkpoint.metrics_dir
    removed = 0
    for batch_id, path in _record_files(directory):
        if batch_id < before_batch_id:
            try:
                directory.filesystem.delete_file(path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def read_barrier(checkpoint: Checkpoint, batch_id: int) -> BarrierMetrics | None:
    """The stored record of barrier ``batch_id``, or ``None`` (none, pruned, or unreadable)."""
    location = checkpoint.metrics_dir.child(f"{batch_id}.json")
    try:
        return BarrierMetrics.from_dict(json.loads(read_text(location)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
