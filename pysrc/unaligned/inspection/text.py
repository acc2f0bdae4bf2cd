"""``unaligned inspect`` without ``--json``: the :class:`~.model.CheckpointView` as text tables."""

from __future__ import annotations

from collections.abc import Sequence

from unaligned.inspection import formatting as fmt
from unaligned.inspection.model import CheckpointView
from unaligned.inspection.query_state import query_state, run_starts


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Columns padded to their widest cell; the first column and numbers right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            numeric = i == 0 or cell[:1].isdigit() or cell == fmt.UNKNOWN
            out.append(cell.rjust(width) if numeric else cell.ljust(width))
        return (indent + "  ".join(out)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _facts(pairs: Sequence[tuple[str, str]], indent: str = "  ") -> str:
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{indent}{label.ljust(width)}  {value}" for label, value in pairs)


def render_text(view: CheckpointView) -> str:
    """The whole human-readable report, ending with a newline."""
    marks = run_starts(view.barriers)
    runs = ", ".join(f"batch {batch} ({mark})" for batch, mark in marks.items())
    parts = [
        _facts(
            [
                ("checkpoint", view.checkpoint),
                ("query id", view.query_id),
                ("state", query_state(view).text),
            ],
            indent="",
        ),
        f"\nBarriers ({len(view.barriers)})" + (f"; runs: {runs}" if runs else ""),
        table(fmt.BARRIER_HEADERS, [fmt.barrier_row(b) for b in view.barriers])
        if view.barriers
        else "  none (no batch planned yet)",
    ]
    parts.append(f"\nIn-doubt sink batches ({len(view.in_doubt)}): decided, not done")
    if view.in_doubt:
        parts.append(table(fmt.IN_DOUBT_HEADERS, [fmt.in_doubt_row(b) for b in view.in_doubt]))
        parts += [f"  batch {b.batch_id}: {b.outcome}" for b in view.in_doubt if b.outcome]
    else:
        parts.append("  none")
    parts += [
        f"  batch {note.get('batchId')}: ended by unaligned abandon --{note.get('choice')} at "
        f"{fmt.timestamp(note.get('atMs'))}"
        for note in view.abandoned
    ]
    if view.table_target is not None:
        parts.append("\nTable target")
        parts.append(_facts(fmt.table_lines(view.table_target)))
    parts.append(f"\nOpen sink transactions: {fmt.transactions_title(view.open_transactions)}")
    if view.open_transactions is not None and view.open_transactions.transactions:
        parts.append(
            table(
                ("transactional id", "state", "producer", "epoch", "started (UTC)", "record"),
                [
                    (
                        t.transactional_id,
                        t.state or fmt.UNKNOWN,
                        fmt.count(t.producer_id),
                        fmt.count(t.producer_epoch),
                        fmt.timestamp(t.start_ms),
                        fmt.transaction_fate(t),
                    )
                    for t in view.open_transactions.transactions
                ],
            )
        )
    parts.append(f'\nSources ({len(view.sources)} format("unaligned"))')
    parts += [_facts(fmt.source_lines(s)) for s in view.sources] or ["  none in the offset log"]
    parts.append(_pending_text(view))
    parts.append("\nQuery")
    parts.append(_facts(fmt.status_lines(view)))
    return "\n".join(parts) + "\n"


def _pending_text(view: CheckpointView) -> str:
    pending = view.pending
    if pending is None:
        return "\nPending channel state: none (no commit record)"
    title = (
        f"\nPending channel state after batch {pending.batch_id}: "
        f"{pending.rows:,} rows in {len(pending.tasks)} task(s)"
    )
    if not pending.tasks:
        return title
    rows = [fmt.pending_task_row(t) for t in pending.tasks]
    return title + "\n" + table(fmt.PENDING_TASK_HEADERS, rows)
