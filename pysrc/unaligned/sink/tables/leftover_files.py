"""Data files of a table that no decision names: found and removed (steps 2f, 3b and 4).

Tasks write straight into the table's data folder, so a killed task, a failed or speculative
attempt, or a batch never decided leaves files there that no snapshot names (an attempt that
finishes after its batch was decided deletes its own files, step 1d of the writer; only one
killed right after writing them leaves them here). Readers never see them (a table is read
through its log or snapshots), but they take space and ``remove_orphan_files`` / ``vacuum``
would be needed. :func:`remove_leftovers` lists the data folder once (folders starting with ``_`` or
``.`` skipped: ``_delta_log``, ``metadata``'s siblings) and deletes, among this query's files
(:func:`unaligned.sink.tables.data_file_writer.parse_data_file_name`) of batches up to
``up_to_batch``:

- a file of a batch with a commit record that the record does not name (the record names what
  the table commit adds, so these were never and will never be committed);
- every file of a batch without a commit record that is newer than the oldest record (an
  undecided batch; older batches without a record had theirs pruned after they were done, and
  their files are the table's).

Nothing of another query is touched (the query id is in every name). The listing is one
recursive walk of the data folder: its cost grows with the table's file count, which the
maintenance of the guide (compaction, snapshot expiry, vacuum) keeps in bounds. Only the files
of the newest :data:`RECENT_BATCHES` batches are weighed (one commit record read per batch
with files), except every :data:`SWEEP_EVERY` batches, when all are: undecided batches are
always the newest, and a zombie attempt finishes within minutes of its batch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.fs as pafs

from unaligned.sink.commit_log import CommitLog
from unaligned.sink.tables.data_file_writer import parse_data_file_name
from unaligned.sink.tables.table_storage import TableStorage

logger = logging.getLogger(__name__)

RECENT_BATCHES = 20
SWEEP_EVERY = 100


def named_files(items: Sequence[Mapping[str, Any]]) -> set[str]:
    """The data files (paths below the data folder) a record's items name."""
    return {str(f["path"]) for item in items for f in item.get("files", ())}


def list_query_files(storage: TableStorage, query_id: str) -> list[tuple[int, str]]:
    """``(batch id, path below the data folder)`` of every data file of ``query_id``."""
    fs = storage.filesystem()
    root = storage.path().rstrip("/")
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    found: list[tuple[int, str]] = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) + 1 :]
        if any(part.startswith(("_", ".")) for part in relative.split("/")[:-1]):
            continue
        parsed = parse_data_file_name(info.base_name)
        if parsed is not None and parsed.query_id == query_id:
            found.append((parsed.batch_id, relative))
    return found


def remove_leftovers(
    storage: TableStorage, query_id: str, log: CommitLog, up_to_batch: int | None
) -> int:
    """Delete this query's files no decision names (see the module); returns how many."""
    decided = log.decided_batch_ids()
    oldest = min(decided) if decided else None
    newest = up_to_batch if up_to_batch is not None else max(decided, default=0)
    low = None if newest % SWEEP_EVERY == 0 else newest - RECENT_BATCHES
    named: dict[int, set[str]] = {}
    fs = storage.filesystem()
    removed = 0
    for batch_id, relative in list_query_files(storage, query_id):
        if up_to_batch is not None and batch_id > up_to_batch:
            continue
        if low is not None and batch_id < low:
            continue
        if batch_id in decided:
            if batch_id not in named:
                record = log.read(batch_id)
                named[batch_id] = named_files(record.prepared) if record is not None else set()
            if relative in named[batch_id]:
                continue
        elif oldest is not None and batch_id < oldest:
            continue
        try:
            fs.delete_file(storage.child(relative))
            removed += 1
        except FileNotFoundError:
            pass
    if removed:
        logger.info("removed %d data file(s) of %s no decision names", removed, storage.uri)
    return removed


def delete_files(storage: TableStorage, items: Sequence[Mapping[str, Any]]) -> None:
    """Delete the data files ``items`` name (an undecided batch's)."""
    fs = storage.filesystem()
    for path in named_files(items):
        try:
            fs.delete_file(storage.child(path))
        except FileNotFoundError:
            pass


def missing_files(storage: TableStorage, items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The files ``items`` name that are missing or not the size their task reported."""
    fs = storage.filesystem()
    wanted = {str(f["path"]): int(f["bytes"]) for item in items for f in item.get("files", ())}
    infos = fs.get_file_info([storage.child(p) for p in wanted])
    return [
        path
        for (path, size), info in zip(wanted.items(), infos, strict=True)
        if info.type != pafs.FileType.File or info.size != size
    ]
