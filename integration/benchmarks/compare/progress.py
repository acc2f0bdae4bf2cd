"""Figures from Spark's progress reports (``query.recentProgress``, one dict per micro-batch).

A batch's duration is its ``durationMs.triggerExecution``: planning, the batch's tasks, the
sink's commit and Spark's commit log, so a batch counts as durable at its ``timestamp`` (when
the trigger began) plus that duration. Spark keeps the newest 100 reports
(``spark.sql.streaming.numRecentProgressUpdates``): the workloads run fewer batches than that.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import datetime
from typing import Any


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (``share`` 0.99 for p99) of ``values``: the smallest value
    with at least that share of the values at or below it (the maximum for fewer than 100)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def epoch_s(timestamp: str) -> float:
    """A progress report's ``timestamp`` (ISO 8601, ``Z``) in epoch seconds."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def batch_figures(progress: Sequence[dict[str, Any]], started_epoch_s: float) -> dict[str, Any]:
    """Batch durations (ms: p50, p99, max, and all in batch order), the input rows of each
    batch, and ``first_commit_s``, the seconds from ``started_epoch_s`` (taken just before
    ``start()``) to the end of the first batch."""
    durations = [p["durationMs"]["triggerExecution"] for p in progress]
    first = progress[0]
    first_end = epoch_s(first["timestamp"]) + first["durationMs"]["triggerExecution"] / 1000
    return {
        "batches": len(durations),
        "duration_ms_p50": statistics.median(durations),
        "duration_ms_p99": percentile(durations, 0.99),
        "duration_ms_max": max(durations),
        "first_commit_s": round(first_end - started_epoch_s, 2),
        "durations_ms": durations,
        "rows_per_batch": [p["numInputRows"] for p in progress],
    }


def rows_and_batch_seconds(progress: Sequence[dict[str, Any]]) -> tuple[int, float]:
    """Input rows of every batch, and the seconds spent inside batches (between batches and
    before the first, Spark plans and waits: that time is in the wall clock only)."""
    rows = sum(p["numInputRows"] for p in progress)
    return rows, sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000


def start_figures(
    progress: Sequence[dict[str, Any]], launched_epoch_s: float, events: dict[str, float]
) -> dict[str, Any]:
    """The start-up figures of a query process launched at ``launched_epoch_s`` (workload 4):
    seconds from the launch to its Spark session (``events["session"]``), to ``start()``
    returning (``events["started"]``) and to the end of its first batch (the first commit);
    the ``addBatch`` seconds of its first three batches (``None`` past the last)."""
    first = progress[0]
    first_end = epoch_s(first["timestamp"]) + first["durationMs"]["triggerExecution"] / 1000
    add_batch = [p["durationMs"].get("addBatch", 0) / 1000 for p in progress[:3]]
    add_batch += [None] * (3 - len(add_batch))
    return {
        "session_s": round(events["session"] - launched_epoch_s, 2),
        "query_started_s": round(events["started"] - launched_epoch_s, 2),
        "first_batch_id": first["batchId"],
        "batch_0_add_batch_s": add_batch[0],
        "first_commit_s": round(first_end - launched_epoch_s, 2),
        "batch_1_add_batch_s": add_batch[1],
        "batch_2_add_batch_s": add_batch[2],
        "batches": len(progress),
    }
