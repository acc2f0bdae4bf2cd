"""How the human-readable renderings (:mod:`.text`, :mod:`.html_report`) write values.

Times are shown in UTC, sizes in binary units, an unknown value as ``-``; the JSON document
(:meth:`~unaligned.inspection.model.CheckpointView.to_dict`) keeps the raw numbers.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from unaligned.inspection.model import (
    BarrierView,
    CheckpointView,
    InDoubtBatch,
    OpenTransaction,
    OpenTransactions,
    PendingTaskState,
    Positions,
    SourceView,
    TableTargetView,
)

UNKNOWN = "-"
TRANSACTIONS_NOT_ASKED = (
    "not asked: pass --bootstrap-servers HOST:PORT (the sink's Kafka options are not stored "
    "in the checkpoint)"
)


def timestamp(ms: int | None) -> str:
    """``2024-05-01 12:00:00.123Z`` for epoch milliseconds."""
    if ms is None:
        return UNKNOWN
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def duration(ms: int | None) -> str:
    """``850 ms``, ``1.2 s``."""
    if ms is None:
        return UNKNOWN
    return f"{ms} ms" if abs(ms) < 1000 else f"{ms / 1000:.1f} s"


def size(n: int | None) -> str:
    """``512 B``, ``1.5 KiB``, ``3.0 MiB``."""
    if n is None:
        return UNKNOWN
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def count(n: int | None) -> str:
    return UNKNOWN if n is None else f"{n:,}"


def positions(values: Positions) -> str:
    """``topic[0:12, 1:40]; other[0:3]``."""
    return "; ".join(
        f"{topic}[" + ", ".join(f"{p}:{values[topic][p]}" for p in sorted(values[topic])) + "]"
        for topic in sorted(values)
    )


def partitions(values: Mapping[str, Sequence[int]]) -> str:
    """``topic[0, 2]``, or ``none``."""
    if not values:
        return "none"
    return "; ".join(
        f"{topic}[" + ", ".join(str(p) for p in values[topic]) + "]" for topic in sorted(values)
    )


BARRIER_HEADERS = (
    "batch",
    "start (UTC)",
    "duration",
    "delay",
    "mode",
    "written",
    "spilled",
    "replayed",
    "state files",
    "state bytes",
    "sink",
    "spark",
    "committed",
)


def barrier_row(b: BarrierView) -> tuple[str, ...]:
    """One barrier as the cells of :data:`BARRIER_HEADERS` (state bytes: files + inline)."""
    state_bytes = (
        None
        if b.channel_state_bytes is None or b.inlined_bytes is None
        else b.channel_state_bytes + b.inlined_bytes
    )
    return (
        str(b.batch_id),
        timestamp(b.start_ms),
        duration(b.duration_ms),
        duration(b.start_delay_ms),
        b.mode or UNKNOWN,
        count(b.rows_written),
        count(b.rows_spilled),
        count(b.rows_replayed),
        count(b.channel_state_files),
        size(state_bytes),
        b.sink,
        b.spark,
        "yes" if b.committed else "no",
    )


IN_DOUBT_HEADERS = (
    "batch",
    "participant",
    "decided (UTC)",
    "items",
    "two-phase commit",
    "transactional ids",
)


def in_doubt_row(b: InDoubtBatch) -> tuple[str, ...]:
    """One in-doubt batch as the cells of :data:`IN_DOUBT_HEADERS`."""
    return (
        str(b.batch_id),
        b.participant,
        timestamp(b.decided_at_ms),
        str(b.prepared_items),
        "yes (never expires)" if b.two_phase_commit else "no",
        ", ".join(b.transactional_ids) or UNKNOWN,
    )


PENDING_TASK_HEADERS = ("task", "rows", "files", "inline", "bytes", "from barriers")


def pending_task_row(t: PendingTaskState) -> tuple[str, ...]:
    """One sink task's pending channel state as the cells of :data:`PENDING_TASK_HEADERS`."""
    return (
        str(t.task_index),
        count(t.rows),
        str(t.files),
        str(t.inline),
        size(t.bytes),
        ", ".join(str(b) for b in t.barriers),
    )


def source_lines(source: SourceView) -> list[tuple[str, str]]:
    """Label and value of each fact about one source."""
    lines = [
        ("source", f"{source.source_id} (offset of batch {source.batch_id})"),
        ("positions", positions(source.positions) or "none"),
        (
            "tasks",
            ("one per partition" if source.read_tasks is None else str(source.read_tasks))
            + (
                " (a layout drain: the next batch deals the partitions anew)"
                if source.layout_drain
                else ""
            ),
        ),
    ]
    if source.ending is None:
        lines.append(("end", "unbounded"))
    else:
        lines.append(("end", positions(source.ending) + (" (drained)" if source.drained else "")))
        lines.append(("finished", partitions(source.finished)))
        lines.append(("endOfData", "yes" if source.end_of_data else "no"))
    return lines


def status_lines(view: CheckpointView) -> list[tuple[str, str]]:
    """Whether the query finished, and its stop request."""
    if view.finished is None:
        finished = "no (no unaligned/finished.json)"
    elif view.finished.has_finished:
        finished = (
            f"yes: final checkpoint {view.finished.final_batch_id} committed at "
            f"{timestamp(view.finished.finished_at_ms)}, nothing pending"
        )
    else:
        finished = (
            f"not now: finished.json names batch {view.finished.final_batch_id}, but Spark "
            "planned or has not committed a later one"
        )
    stop = view.stop_request
    if stop is None:
        request = "none"
    else:
        request = (
            f"{'drain' if stop.drain else 'no drain'}, requested {timestamp(stop.requested_at_ms)}"
        )
        if stop.honoured_by is None:
            request += ", not honoured yet"
        else:
            request += f", honoured {timestamp(stop.honoured_at_ms)} by {stop.honoured_by}"
        if stop.completed_batch_id is not None:
            request += f", completed by final checkpoint {stop.completed_batch_id}"
    return [("finished", finished), ("stop request", request)]


def transactions_title(found: OpenTransactions | None) -> str:
    if found is None:
        return TRANSACTIONS_NOT_ASKED
    title = f"prefix {found.prefix!r} (from {found.prefix_from}): {len(found.transactions)} open"
    if found.stem and found.stem != found.prefix:
        title += f"; this query's ids start with {found.stem!r}"
    return title


def transaction_fate(t: OpenTransaction) -> str:
    """What becomes of an open transaction under the query's prefix."""
    if not t.this_query:
        return "another query's: never touched by this one"
    if t.named_by_batch is None:
        return "none: fenced by the clean-up"
    return f"batch {t.named_by_batch}: committed on restart"


def table_lines(t: TableTargetView) -> list[tuple[str, str]]:
    """The table target's facts: the table, where it is reached, this query's last batch."""
    lines = [
        ("table", f"{t.table} ({t.format})"),
        ("reached through", t.reached_through),
        ("data files", t.data_location),
    ]
    if t.read_error is not None:
        return [*lines, ("not read", t.read_error)]
    kind = "snapshot" if t.format == "iceberg" else "version"
    last = (
        "none of this query"
        if t.last_batch_id is None
        else f"batch {t.last_batch_id} ({kind} {t.snapshot or UNKNOWN})"
    )
    return [*lines, ("last batch in it", last)]
