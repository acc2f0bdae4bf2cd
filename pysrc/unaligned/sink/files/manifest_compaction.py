"""Compacting a query's manifest: its finished entries folded into one file, old ones expired.

:func:`compact_manifest` folds a query's finished entries older than its newest
``manifest_retain`` into one compacted file written *before* the folded ones are deleted, and
with a ``retention`` leaves out every batch decided longer ago (Spark's file sink
``retention``, SPARK-27188). A compacted file keeps two marks of what it no longer lists
(:class:`CompactedMarks`): the query's position in ``_spark_metadata`` and the newest expired
batch; :func:`log_position` is where the query's next batch's search of that log starts.
Names and entries: :mod:`unaligned.sink.files.file_manifest`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from unaligned._util.fs import Location, atomic_write, read_bytes
from unaligned.errors import CommitLogError
from unaligned.sink.files.file_manifest import (
    MANIFEST_DIR,
    MANIFEST_VERSION,
    ManifestEntry,
    ManifestName,
    compacted_manifest_name,
    list_manifest,
    read_manifest_file,
)
from unaligned.sink.files.spark_log_layout import LogPosition

logger = logging.getLogger(__name__)


def compact_manifest(
    output: Location,
    query_id: str,
    *,
    retain: int,
    compact_every: int,
    unfinished: Collection[int],
    up_to_batch: int | None,
    retention_ms: int | None = None,
) -> int:
    """Fold the query's finished entries (not in ``unfinished``, at most ``up_to_batch``) older
    than its newest ``retain`` into one compacted file, once more than ``retain +
    compact_every`` are live. With ``retention_ms``, a finished batch decided longer ago than
    that leaves the manifest (Spark's file sink ``retention``, SPARK-27188): its entry is
    deleted and the compacted file no longer lists it; its data files stay where they are.

    Runs in the query's driver only (commit, abort, recovery: one at a time). Order: write
    the new compacted file (every kept batch of the older compacted files and the folded
    entries), then delete the older compacted files, then the folded and expired entries; each
    file is deleted only by a compaction that read it and wrote what it keeps first. A
    compaction that finds a listed file gone (another one ran at the same time) deletes
    nothing. Returns how many entries were folded or expired.
    """
    names = [m for m in list_manifest(output) if m.query_id == query_id]
    entries = sorted((m for m in names if not m.compacted), key=lambda m: m.batch_id)
    if len(entries) <= retain + compact_every:
        return 0
    finished = [
        m
        for m in entries
        if m.batch_id not in unfinished and (up_to_batch is None or m.batch_id <= up_to_batch)
    ]
    finished_ids = {m.batch_id for m in finished}
    by_count = {m.batch_id for m in entries[:-retain] if m.batch_id in finished_ids}
    if not by_count and retention_ms is None:
        return 0
    compacted = [m for m in names if m.compacted]
    # With a retention every finished entry is read: the newest ones can have expired too.
    readable = (
        finished if retention_ms is not None else [m for m in finished if m.batch_id in by_count]
    )
    batches: dict[int, ManifestEntry] = {}
    marks = CompactedMarks(spark_log=-1, expired_through=-1)
    try:
        for name in compacted:
            marks = marks.merge(compacted_marks(output, name))
            for entry in read_manifest_file(output, name):
                batches[entry.batch_id] = entry
        for name in readable:
            for entry in read_manifest_file(output, name):
                batches[entry.batch_id] = entry
    except FileNotFoundError as exc:
        # Another compaction of this query ran meanwhile (a commit process of an earlier
        # run still going): it has folded what this one listed. Delete nothing.
        logger.warning("manifest of query %s changed while compacting (%s)", query_id, exc)
        return 0
    now_ms = int(time.time() * 1000)
    expired = {
        b
        for b, e in batches.items()
        if retention_ms is not None and now_ms - e.expiry_base_ms > retention_ms
    }
    fold = [m for m in readable if m.batch_id in by_count or m.batch_id in expired]
    if not fold:
        return 0
    folded_ids = {m.batch_id for m in fold}
    unfolded = {m.batch_id for m in readable} - folded_ids
    kept = {b: e for b, e in batches.items() if b not in expired and b not in unfolded}
    marks = CompactedMarks(
        spark_log=max(
            [marks.spark_log, *(e.spark_log for e in batches.values() if e.spark_log is not None)]
        ),
        expired_through=max([marks.expired_through, *expired]),
    )
    through = max([*kept, *folded_ids, *(m.batch_id for m in compacted)])
    target = compacted_manifest_name(query_id, through)
    atomic_write(
        output.child(MANIFEST_DIR, target),
        json.dumps(_compacted_doc(query_id, through, kept, marks), sort_keys=True).encode(),
    )
    fs = output.filesystem
    for name in (*compacted, *fold):
        if name.name != target:
            try:
                fs.delete_file(output.child(MANIFEST_DIR, name.name).path)
            except FileNotFoundError:
                pass
    logger.info(
        "manifest of query %s: folded %d entries into %s (%d batches kept, %d expired)",
        query_id,
        len(fold),
        target,
        len(kept),
        len(expired),
    )
    return len(fold)


def _compacted_doc(
    query_id: str, through: int, batches: Mapping[int, ManifestEntry], marks: CompactedMarks
) -> dict[str, Any]:
    ordered = [batches[b] for b in sorted(batches)]
    doc: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "compacted": True,
        "queryId": query_id,
        "throughBatchId": through,
        "sparkLog": marks.spark_log,
        "expiredThroughBatchId": marks.expired_through,
        "batches": [
            {
                "batchId": e.batch_id,
                "committedAtMs": e.committed_at_ms,
                "decidedAtMs": e.decided_at_ms,
            }
            for e in ordered
        ],
        "files": [
            {"batchId": e.batch_id, "path": f.path, "rows": f.rows, "bytes": f.bytes}
            for e in ordered
            for f in e.files
        ],
    }
    if ordered:
        doc["schema"] = json.loads(ordered[-1].schema.json())
    return doc


@dataclass(frozen=True)
class CompactedMarks:
    """What a compacted file keeps of the batches it no longer lists: the query's position in
    the ``_spark_metadata`` log, and the newest batch that expired (``retention``); -1: none."""

    spark_log: int
    expired_through: int

    def merge(self, other: CompactedMarks) -> CompactedMarks:
        return CompactedMarks(
            max(self.spark_log, other.spark_log), max(self.expired_through, other.expired_through)
        )


def compacted_marks(output: Location, name: ManifestName) -> CompactedMarks:
    """The marks of compacted file ``name`` (files of earlier versions have none: -1)."""
    data = read_bytes(output.child(MANIFEST_DIR, name.name))
    if data is None:
        raise FileNotFoundError(name.name)
    try:
        doc = json.loads(data.decode("utf-8"))
        return CompactedMarks(
            int(doc.get("sparkLog", -1)), int(doc.get("expiredThroughBatchId", -1))
        )
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise CommitLogError(f"compacted manifest {name.name} is unreadable: {exc!r}") from exc


def log_position(output: Location, query_id: str, before_batch: int) -> LogPosition:
    """Where the query's newest batch before ``before_batch`` is in the ``_spark_metadata``
    log (-1: nowhere yet), with the log's interval when that entry knew it: an append of
    ``before_batch`` can only be after it."""
    names = [m for m in list_manifest(output) if m.query_id == query_id]
    older = sorted(
        (m for m in names if not m.compacted and m.batch_id < before_batch),
        key=lambda m: m.batch_id,
        reverse=True,
    )
    for name in older:  # the newest entry has it, unless written by an earlier version
        try:
            entry = read_manifest_file(output, name)[0]
        except FileNotFoundError:
            continue
        if entry.spark_log is not None:
            return LogPosition(entry.spark_log, entry.spark_log_interval)
    marks = CompactedMarks(-1, -1)
    for name in (m for m in names if m.compacted):
        try:
            marks = marks.merge(compacted_marks(output, name))
        except FileNotFoundError:
            continue
    return LogPosition(marks.spark_log)
