"""This query's snapshots in an Iceberg table's history, and the one-copy transaction.

- :func:`newest_batch` / :func:`snapshot_of`: the lineage of the current snapshot walked newest
  first (parent by parent, through one id-to-snapshot map: pyiceberg's ``snapshot_by_id`` scans
  the whole list at each step), stopping at the newest snapshot of this query (as Flink's
  ``SinkUtil.getMaxCommittedCheckpointId``): other writers' snapshots after ours are passed
  over, and the walk reads no further than our newest one.
- :class:`OneCopyTransaction`: pyiceberg's ``Transaction`` computes the staged table metadata
  again, with a deep copy of the whole metadata (every snapshot, the snapshot and metadata
  logs), at each of the ~15 reads one snapshot commit makes; a cost that grows with the
  table's snapshot count. This one computes it once per staged change (the metadata models are
  frozen: sharing one copy is safe). Reads pyiceberg's private ``Transaction._updates``
  (pyiceberg pinned ``>=0.12,<0.13``; ``tests/sink/tables/test_iceberg_history.py`` fails if
  it changes).
"""

from __future__ import annotations

from typing import Any

QUERY_ID_KEY = "spark.sql.streaming.queryId"
BATCH_ID_KEY = "spark.sql.streaming.epochId"


def _ours(snapshot: Any, query_id: str) -> bool:
    summary = snapshot.summary
    return summary is not None and summary.get(QUERY_ID_KEY) == query_id


def lineage(table: Any) -> Any:
    """The current snapshot and its ancestors, newest first."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None


def newest_snapshot(table: Any, query_id: str) -> Any:
    """This query's newest snapshot in the current lineage, or ``None``."""
    return next((s for s in lineage(table) if _ours(s, query_id)), None)


def newest_batch(table: Any, query_id: str) -> int | None:
    """The batch of this query's newest snapshot in the current lineage."""
    snapshot = newest_snapshot(table, query_id)
    return None if snapshot is None else int(snapshot.summary[BATCH_ID_KEY])


def snapshot_of(table: Any, query_id: str, batch_id: int) -> str | None:
    """The id of the snapshot holding ``batch_id`` of this query; the walk stops at the first
    snapshot of this query with a batch at or below it."""
    for snapshot in lineage(table):
        if _ours(snapshot, query_id):
            batch = int(snapshot.summary[BATCH_ID_KEY])
            if batch == batch_id:
                return str(snapshot.snapshot_id)
            if batch < batch_id:
                return None
    return None


def one_copy_transaction(table: Any, autocommit: bool = False) -> Any:
    """A pyiceberg ``Transaction`` on ``table`` whose staged metadata is computed once per
    staged change."""
    from pyiceberg.table import Transaction

    class OneCopyTransaction(Transaction):
        _staged: tuple[Any, Any, Any] | None = None

        @property
        def table_metadata(self) -> Any:
            updates, base = self._updates, self._table.metadata
            staged = self._staged
            if staged is None or staged[0] is not updates or staged[1] is not base:
                # nothing staged: the loaded metadata itself (pyiceberg would copy it whole)
                staged = (updates, base, super().table_metadata if updates else base)
                self._staged = staged
            return staged[2]

    return OneCopyTransaction(table, autocommit=autocommit)
