"""The table a table sink writes, for ``unaligned inspect``: named, and read.

The checkpoint names the table (:mod:`unaligned.sink.tables.table_record`, written at each
query start); the table itself says which of this query's batches it holds (Iceberg: the
``unaligned.committed-batch.<query id>`` property or the snapshots' summaries; Delta: the app
transaction's version). :func:`table_view` shows the last one with its snapshot id or table
version, and says for each in-doubt batch (decided, not done) whether its table commit landed:
a crash or an unreachable catalog between the decision and the done marker leaves it
unknown to the checkpoint. Credentials the record leaves out come from the environment
(pyiceberg's ``PYICEBERG_CATALOG__<NAME>__<PROPERTY>``, the ``AWS_*`` variables); a table that
cannot be read is shown with the error, and its in-doubt batches as unknown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from unaligned.checkpoint import Checkpoint
from unaligned.inspection.model import InDoubtBatch, TableTargetView
from unaligned.sink.table_target import TableFormat, TableTarget
from unaligned.sink.tables.table_record import read_record


def _reader(target: TableTarget, query_id: str) -> Any:
    if target.format is TableFormat.DELTA:
        from unaligned.sink.tables.delta_table import DeltaTarget

        return DeltaTarget(target, query_id)
    from unaligned.sink.tables.iceberg_table import IcebergTarget

    return IcebergTarget(target, query_id)


def table_view(
    checkpoint: Checkpoint, query_id: str, in_doubt: Sequence[InDoubtBatch]
) -> tuple[TableTargetView | None, tuple[InDoubtBatch, ...]]:
    """The table target (``None`` without a record) and ``in_doubt`` with each table batch's
    outcome."""
    record = read_record(checkpoint)
    if record is None:
        return None, tuple(in_doubt)
    target = record.target
    view = TableTargetView(
        format=target.format.value,
        table=target.location,
        catalog_name=target.catalog_name if target.format is TableFormat.ICEBERG else None,
        reached_through=target.reached_through(),
        data_location=record.data_uri,
    )
    try:
        reader = _reader(target, query_id)
        last = reader.committed_batch()
        snapshot = reader.snapshot_of(last) if last is not None else None
    except Exception as exc:  # ours, or a table library's own (pyiceberg, deltalake)
        error = f"{type(exc).__name__}: {exc}"
        unknown = f"unknown: {target.describe()} could not be read ({error})"
        return dataclasses.replace(view, read_error=error), tuple(
            dataclasses.replace(b, outcome=unknown) if b.participant == target.format.value else b
            for b in in_doubt
        )
    view = dataclasses.replace(view, last_batch_id=last, snapshot=snapshot)
    return view, tuple(_with_outcome(b, target, last) for b in in_doubt)


def _with_outcome(batch: InDoubtBatch, target: TableTarget, last: int | None) -> InDoubtBatch:
    if batch.participant != target.format.value:
        return batch
    if last is not None and batch.batch_id <= last:
        outcome = (
            f"its table commit landed ({target.describe()} holds this query's batches up to "
            f"{last}); a restart only marks it done"
        )
        return dataclasses.replace(batch, outcome=outcome, in_table=True)
    outcome = (
        f"its table commit did not land ({target.describe()} holds "
        f"{'no batch of this query' if last is None else f'up to batch {last}'}); a restart "
        "commits it once"
    )
    return dataclasses.replace(batch, outcome=outcome, in_table=False)
