"""What a checkpoint's history says about its query: its state, its restarts, and the barriers
over the timeout, in words for ``unaligned inspect`` and ``unaligned report``.

The checkpoint keeps no error and no run id (Spark writes neither), so these are read from its
shape:

- **state**: no batch planned; batches planned but none committed; the newest batch planned
  but not committed (running now, or the query failed or was stopped during it); committed up to
  the newest; finished (``finished.json``). A query that failed says why only in its driver's
  log and in ``query.exception()``; the page says so instead of showing an empty history as if
  nothing were wrong.
- **runs**: the first batch of every run waits for the run's Python workers (the sink's planner
  starts, checks the broker and recovers; 7 s on the demo's 2 cores, against about 0.1 s for
  later batches), and a batch a crashed run had planned is run again with its old
  ``batchTimestampMs``, so its start delay also holds the outage. A start delay of
  :data:`RUN_START_DELAY_MS` or more marks the first batch of a run: a start, or a restart when
  it is not the first batch the checkpoint shows (a planning stall that long looks the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from unaligned.inspection import formatting as fmt
from unaligned.inspection.model import BarrierView, CheckpointView

RUN_START_DELAY_MS = 2_000
"""A barrier whose first sink task started this long after the batch start is the first batch
of a run (or its planning stalled that long)."""

StateKind = Literal["not started", "never committed", "last batch open", "committed", "finished"]


@dataclass(frozen=True)
class QueryState:
    """The query as the checkpoint shows it; ``problem`` when the page should warn."""

    kind: StateKind
    text: str

    @property
    def problem(self) -> bool:
        return self.kind in ("not started", "never committed", "last batch open")


_WHY = (
    "The checkpoint keeps no error: if the query failed, its driver's log and "
    "query.exception() say why."
)


def query_state(view: CheckpointView) -> QueryState:
    """The query's state read from the shape of its checkpoint (see the module docstring)."""
    barriers = view.barriers
    if view.finished is not None and view.finished.has_finished:
        return QueryState(
            "finished",
            f"Finished: final checkpoint {view.finished.final_batch_id} committed at "
            f"{fmt.timestamp(view.finished.finished_at_ms)}; nothing is pending or open.",
        )
    if not barriers:
        return QueryState(
            "not started",
            "No batch was ever planned: the query failed or was stopped before its first "
            f"batch, or has not planned one yet. {_WHY}",
        )
    newest = barriers[-1]
    if not any(b.committed for b in barriers):
        return QueryState(
            "never committed",
            f"No batch was ever committed: batch {newest.batch_id} was planned at "
            f"{fmt.timestamp(newest.start_ms)} and is {_sides(newest)}. The query failed or was "
            f"stopped during it, or is running it now; a restart runs it again. {_WHY}",
        )
    if not newest.committed:
        return QueryState(
            "last batch open",
            f"The newest batch, {newest.batch_id} (planned at {fmt.timestamp(newest.start_ms)}), "
            f"is {_sides(newest)}: the query is running it now, or failed or was stopped during "
            f"it; a restart runs it again. {_WHY}",
        )
    return QueryState(
        "committed",
        f"Committed up to batch {newest.batch_id}: the query is running, or was stopped "
        "between batches.",
    )


def _sides(b: BarrierView) -> str:
    sink = {
        "undecided": "not decided by the sink",
        "in-doubt": "decided by the sink but not done (a restart commits it)",
        "done": "done by the sink",
        "pruned": "done by the sink",
    }[b.sink]
    spark = "committed by Spark" if b.spark in ("committed", "pruned") else "not committed by Spark"
    return f"{sink}, {spark}"


RunMark = Literal["start", "restart"]


def run_starts(barriers: Sequence[BarrierView]) -> dict[int, RunMark]:
    """The batches that began a run (start delay of :data:`RUN_START_DELAY_MS` or more):
    ``start`` for the oldest barrier shown, ``restart`` for any later one."""
    marks: dict[int, RunMark] = {}
    for index, b in enumerate(barriers):
        if b.start_delay_ms is not None and b.start_delay_ms >= RUN_START_DELAY_MS:
            marks[b.batch_id] = "start" if index == 0 else "restart"
    return marks


def over_timeout_note(
    barriers: Sequence[BarrierView], timeout_ms: int, final_batch: int | None = None
) -> str | None:
    """Why barriers over ``alignedCheckpointTimeout`` are normal in unaligned mode, or what it
    means in aligned mode; ``None`` when none is over. The first batch of a run is counted apart
    (its time holds the run's start-up and, after a crash, the outage), and so is the final
    checkpoint ``final_batch`` (it writes everything pending and never cuts)."""
    starts = run_starts(barriers)
    over_all = [b for b in barriers if b.duration_ms is not None and b.duration_ms > timeout_ms]
    if not over_all:
        return None
    over = [b for b in over_all if b.batch_id not in starts]
    parts = [
        f"{len(over_all)} barrier(s) took longer than alignedCheckpointTimeout "
        f"({fmt.duration(timeout_ms)})."
    ]
    if len(over) < len(over_all):
        parts.append(
            f"{len(over_all) - len(over)} of them began a run: their time holds the run's "
            "start-up (after a crash, also the outage)."
        )
    unaligned = [b for b in over if b.mode == "unaligned" and b.batch_id != final_batch]
    if unaligned:
        worst = max((b.duration_ms or 0) - timeout_ms for b in unaligned)
        parts.append(
            f"{len(unaligned)} unaligned, by at most {fmt.duration(worst)}: this is expected. "
            "The timeout is the moment a sink task stops writing and spills the rest of its "
            "input as channel state; the barrier then waits for what was already sent to be "
            "acknowledged, writes the state and commits, so it ends somewhat after the timeout. "
            "Worry only when the overshoot grows batch after batch (a slow channel-state file "
            "system or broker: lower maxUnacknowledgedBytes)."
        )
    final = [b for b in over if b.batch_id == final_batch]
    if final:
        parts.append(
            f"Batch {final_batch} is the final checkpoint: it writes every pending row and never "
            "cuts, so it may take longer."
        )
    aligned = len(over) - len(unaligned) - len(final)
    if aligned:
        parts.append(
            f"{aligned} aligned: no task cut, so the batch waited for the sink to write "
            "everything (checkpointMode=aligned, or the tasks finished writing just after the "
            "timeout)."
        )
    return " ".join(parts)
