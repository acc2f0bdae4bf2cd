"""``unaligned report``: one self-contained HTML page about a checkpoint.

The barrier timeline the way Flink's checkpoint tab shows checkpoints: per barrier its duration
against ``alignedCheckpointTimeout``, its start delay, the rows spilled to and replayed from
channel state, and the channel-state bytes; a min/avg/max summary; the history table; and the
rest of ``unaligned inspect``. Inline CSS and inline SVG (:mod:`.svg_charts`) only: the page
loads nothing and runs no script, so it renders offline and in any browser.

``alignedCheckpointTimeout`` is a sink option, not stored in the checkpoint: the caller passes
it (``--timeout``, 30 s by default) and the page says it was assumed. The query's state, its
runs (marked on the charts and in the history) and why barriers over the timeout are normal in
unaligned mode come from :mod:`.query_state`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from unaligned.inspection import formatting as fmt
from unaligned.inspection.model import BarrierView, CheckpointView
from unaligned.inspection.query_state import over_timeout_note, query_state, run_starts
from unaligned.inspection.svg_charts import Series, bar_chart, legend

DEFAULT_TIMEOUT_MS = 30_000

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;
background:#fff;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid
#ddd;padding-bottom:4px}
.sub{color:#666}.note{background:#fff7e0;border:1px solid #f0d890;padding:6px 10px;
border-radius:4px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}
table{border-collapse:collapse;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:3px 10px;text-align:right;white-space:nowrap}
th{background:#f5f5f5}td.l,th.l{text-align:left}
tr.no td{color:#a33}.scroll{overflow-x:auto}
svg.chart{display:block;max-width:1100px;border:1px solid #eee}
svg .grid{stroke:#eee}svg .axis-line{stroke:#999}svg .axis{font-size:11px;fill:#555}
svg .threshold{stroke:#d62728;stroke-width:2;stroke-dasharray:6 4}
svg .threshold-label{font-size:12px;fill:#d62728;paint-order:stroke;stroke:#fff;stroke-width:4px}
rect.aligned,.swatch.aligned{fill:#4c78a8;background:#4c78a8}
rect.unaligned,.swatch.unaligned{fill:#f58518;background:#f58518}
rect.delay,.swatch.delay{fill:#72b7b2;background:#72b7b2}
rect.spilled,.swatch.spilled{fill:#e45756;background:#e45756}
rect.replayed,.swatch.replayed{fill:#54a24b;background:#54a24b}
rect.file-bytes,.swatch.file-bytes{fill:#b279a2;background:#b279a2}
rect.inline-bytes,.swatch.inline-bytes{fill:#9d755d;background:#9d755d}
.legend{margin:4px 0 0;font-size:12px}.legend span{margin-right:16px}
.swatch{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:0}dt{color:#666}
dd{margin:0}
.state{padding:8px 12px;border-radius:4px;border:1px solid #9c9;background:#eefbea}
.state.problem{border-color:#d88;background:#fdecea;color:#7a1c12;font-weight:600}
svg .marker{stroke:#333;stroke-width:1.5;stroke-dasharray:3 3}
svg .marker-label{font-size:11px;fill:#333;paint-order:stroke;stroke:#fff;stroke-width:3px}
"""


_LEFT_TD = '<td class="l">'


def _e(text: object) -> str:
    return html.escape(str(text))


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], row_classes: Sequence[str] = ()
) -> str:
    head = "".join(f'<th class="{"l" if i else ""}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        css = f' class="{row_classes[r]}"' if r < len(row_classes) and row_classes[r] else ""
        cells = "".join(
            (_LEFT_TD if i and not cell[:1].isdigit() else "<td>") + f"{_e(cell)}</td>"
            for i, cell in enumerate(row)
        )
        body.append(f"<tr{css}>{cells}</tr>")
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _facts(pairs: Sequence[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs) + "</dl>"


def _stat_row(
    name: str, values: Sequence[int | None], show: Callable[[int | None], str]
) -> tuple[str, ...]:
    known = [v for v in values if v is not None]
    if not known:
        return (name, fmt.UNKNOWN, fmt.UNKNOWN, fmt.UNKNOWN)
    return (name, show(min(known)), show(round(sum(known) / len(known))), show(max(known)))


def _state_bytes(b: BarrierView) -> int | None:
    if b.channel_state_bytes is None or b.inlined_bytes is None:
        return None
    return b.channel_state_bytes + b.inlined_bytes


def _charts(barriers: Sequence[BarrierView], timeout_ms: int) -> str:
    ids = [str(b.batch_id) for b in barriers]
    marks = {str(batch): mark for batch, mark in run_starts(barriers).items()}
    modes = [b.mode or "aligned" for b in barriers]

    def values(pick: Callable[[BarrierView], int | None]) -> list[float | None]:
        return [None if pick(b) is None else float(pick(b) or 0) for b in barriers]

    def ms(v: float) -> str:
        return fmt.duration(round(v))

    def rows(v: float) -> str:
        return fmt.count(round(v))

    def size(v: float) -> str:
        return fmt.size(round(v))

    duration = bar_chart(
        "chart-duration",
        ids,
        [Series("duration", "aligned", values(lambda b: b.duration_ms), modes)],
        label=ms,
        threshold=float(timeout_ms),
        threshold_label=f"alignedCheckpointTimeout {fmt.duration(timeout_ms)} (assumed)",
        markers=marks,
    )
    delay = bar_chart(
        "chart-start-delay",
        ids,
        [Series("start delay", "delay", values(lambda b: b.start_delay_ms))],
        label=ms,
        markers=marks,
    )
    spilled = bar_chart(
        "chart-rows",
        ids,
        [
            Series("rows spilled", "spilled", values(lambda b: b.rows_spilled)),
            Series("rows replayed", "replayed", values(lambda b: b.rows_replayed)),
        ],
        label=rows,
    )
    state = bar_chart(
        "chart-state-bytes",
        ids,
        [
            Series(
                "channel-state file bytes", "file-bytes", values(lambda b: b.channel_state_bytes)
            ),
            Series("inline bytes", "inline-bytes", values(lambda b: b.inlined_bytes)),
        ],
        label=size,
    )
    return "".join(
        [
            "<h2>Barrier duration (batch start to commit) against the timeout</h2>",
            duration,
            legend(
                [("aligned", "aligned barrier"), ("unaligned", "unaligned barrier (a task cut)")]
            ),
            "<h2>Start delay (first sink task start minus batch start)</h2>",
            delay,
            '<p class="legend">A dashed line marks the first batch of a run (a start or a '
            "restart): it waits for the run's Python workers, and a batch a crashed run had "
            "planned is run again with its old start, so its delay and duration include the "
            "outage.</p>",
            "<h2>Rows spilled to and replayed from channel state</h2>",
            spilled,
            legend(
                [
                    ("spilled", "spilled at this barrier"),
                    ("replayed", "replayed from earlier state"),
                ]
            ),
            "<h2>Channel state written at the barrier</h2>",
            state,
            legend([("file-bytes", "in files"), ("inline-bytes", "inline in the commit record")]),
        ]
    )


def render_html(view: CheckpointView, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> str:
    """The whole page."""
    barriers = view.barriers
    measured = [b for b in barriers if b.has_metrics]
    unaligned = sum(1 for b in measured if b.mode == "unaligned")
    over = sum(1 for b in measured if (b.duration_ms or 0) > timeout_ms)
    pending_rows = 0 if view.pending is None else view.pending.rows
    finished = "yes" if view.finished is not None and view.finished.has_finished else "no"
    state = query_state(view)
    final_batch = view.finished.final_batch_id if view.finished is not None else None
    over_note = over_timeout_note(measured, timeout_ms, final_batch)
    cards = [
        ("barriers", f"{len(barriers)}"),
        ("unaligned", f"{unaligned}"),
        ("over the timeout", f"{over}"),
        ("committed", f"{sum(1 for b in barriers if b.committed)}"),
        ("in-doubt", f"{len(view.in_doubt)}"),
        ("pending rows", fmt.count(pending_rows)),
        ("finished", finished),
    ]
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>unaligned checkpoint {_e(view.query_id)}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Checkpoint report</h1>",
        f'<div class="sub">{_e(view.checkpoint)} &middot; query {_e(view.query_id)}</div>',
        f'<p class="state{" problem" if state.problem else ""}" id="query-state" '
        f'data-state="{_e(state.kind)}">{_e(state.text)}</p>',
        '<div class="cards">'
        + "".join(
            f'<div class="card" data-card="{_e(k)}"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in cards
        )
        + "</div>",
        f'<p class="note" id="timeout-note">alignedCheckpointTimeout is a sink option and is not '
        f"stored in the checkpoint: this page assumes {_e(fmt.duration(timeout_ms))} "
        "(<code>unaligned report --timeout</code>).</p>",
    ]
    if over_note is not None:
        parts.append(f'<p class="note" id="over-timeout-note">{_e(over_note)}</p>')
    if measured:
        parts.append("<h2>Summary</h2>")
        parts.append(
            _table(
                ("", "minimum", "average", "maximum"),
                [
                    _stat_row("duration", [b.duration_ms for b in measured], fmt.duration),
                    _stat_row("start delay", [b.start_delay_ms for b in measured], fmt.duration),
                    _stat_row("rows spilled", [b.rows_spilled for b in measured], fmt.count),
                    _stat_row("rows replayed", [b.rows_replayed for b in measured], fmt.count),
                    _stat_row("channel-state bytes", [_state_bytes(b) for b in measured], fmt.size),
                ],
            )
        )
    if measured:
        parts.append(_charts(barriers, timeout_ms))
    elif barriers:
        parts.append(
            "<p>No charts: no barrier has metrics (the sink writes them when it commits a "
            "batch, and it committed none).</p>"
        )
    marks = run_starts(barriers)
    parts.append("<h2>History</h2>")
    parts.append(
        _table(
            fmt.BARRIER_HEADERS,
            [_history_row(b, marks.get(b.batch_id)) for b in reversed(barriers)],
            ["" if b.committed else "no" for b in reversed(barriers)],
        )
        if barriers
        else "<p>No batch planned yet.</p>"
    )
    parts.append(_rest(view))
    parts.append("</body></html>\n")
    return "".join(parts)


def _history_row(b: BarrierView, mark: str | None) -> tuple[str, ...]:
    row = fmt.barrier_row(b)
    return row if mark is None else (f"{row[0]} ({mark})", *row[1:])


def _rest(view: CheckpointView) -> str:
    parts = [f"<h2>In-doubt sink batches ({len(view.in_doubt)})</h2>"]
    parts.append(
        _table(fmt.IN_DOUBT_HEADERS, [fmt.in_doubt_row(b) for b in view.in_doubt])
        if view.in_doubt
        else "<p>None: every decided batch is done.</p>"
    )
    parts += [f"<p>Batch {b.batch_id}: {_e(b.outcome)}</p>" for b in view.in_doubt if b.outcome]
    parts.append("<h2>Open sink transactions</h2>")
    parts.append(f"<p>{_e(fmt.transactions_title(view.open_transactions))}</p>")
    if view.open_transactions is not None and view.open_transactions.transactions:
        parts.append(
            _table(
                ("transactional id", "state", "started (UTC)", "record"),
                [
                    (
                        t.transactional_id,
                        t.state or fmt.UNKNOWN,
                        fmt.timestamp(t.start_ms),
                        fmt.transaction_fate(t),
                    )
                    for t in view.open_transactions.transactions
                ],
            )
        )
    parts.append("<h2>Sources</h2>")
    parts += [_facts(fmt.source_lines(s)) for s in view.sources] or [
        '<p>No format("unaligned") source in the offset log.</p>'
    ]
    parts.append("<h2>Pending channel state</h2>")
    pending = view.pending
    if pending is None:
        parts.append("<p>None (no commit record).</p>")
    else:
        parts.append(
            f"<p>After batch {pending.batch_id}: {_e(fmt.count(pending.rows))} rows in "
            f"{len(pending.tasks)} task(s).</p>"
        )
        if pending.tasks:
            parts.append(
                _table(fmt.PENDING_TASK_HEADERS, [fmt.pending_task_row(t) for t in pending.tasks])
            )
    parts.append("<h2>Query</h2>")
    parts.append(_facts(fmt.status_lines(view)))
    return "".join(parts)
