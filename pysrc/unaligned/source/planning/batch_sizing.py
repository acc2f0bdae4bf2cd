"""``targetBatchDuration``: size each batch from the throughput seen in earlier batches.

An unaligned barrier can only overtake rows that exist: a slow *transformation* before the sink
(a heavy UDF, a slow lookup) produces its rows slowly, and the sink has nothing in flight to
spill. For that case the source keeps batches short instead. It measures what the query
actually achieved — the rows planned for the previous batch over the time until Spark asked for
the next one (Spark runs micro-batches one after another, so that time is the previous batch's
duration plus any trigger wait) — and caps the next batch at ``throughput x target`` rows.
That is Spark Streaming's old backpressure idea, inside the admission control of Spark 4.3.

Rules:

- The first batch (no measurement yet) reads at most :data:`FIRST_BATCH_ROWS_PER_PARTITION`
  rows per partition; every measured batch re-estimates the throughput (exponential average).
- The cap grows by at most :data:`MAX_GROWTH` per batch, so one fast empty-ish batch does not
  open the gates, and is never below one row per partition with backlog (progress).
- Batches with nothing planned (idle) are not measurements.
- The engine's ``ReadAllAvailable`` still overrides the cap, as Spark's contract requires.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

FIRST_BATCH_ROWS_PER_PARTITION = 1_000
MAX_GROWTH = 4.0
UNCAPPED_ROWS = 2**62
"""The default ReadMaxRows of a source with only ``targetBatchDuration``: caps nothing itself,
but makes Spark pass a limit (not ReadAllAvailable) so the source may size the batch."""
SMOOTHING = 0.5
"""Weight of the newest measurement in the throughput average."""


@dataclass
class BatchSizer:
    """Driver-side state of one source; call :meth:`cap` then :meth:`planned` per batch."""

    target_ms: int
    clock: Callable[[], float]
    """Monotonic seconds."""
    _rows_per_s: float | None = field(default=None, init=False)
    _last_cap: int | None = field(default=None, init=False)
    _last_planned_rows: int = field(default=0, init=False)
    _last_planned_at: float | None = field(default=None, init=False)

    def cap(self, partitions_with_backlog: int) -> int:
        """At most this many rows in the next batch (over all partitions)."""
        now = self.clock()
        if self._last_planned_at is not None and self._last_planned_rows > 0:
            elapsed = max(now - self._last_planned_at, 1e-3)
            measured = self._last_planned_rows / elapsed
            self._rows_per_s = (
                measured
                if self._rows_per_s is None
                else SMOOTHING * measured + (1 - SMOOTHING) * self._rows_per_s
            )
        floor = max(1, partitions_with_backlog)
        if self._rows_per_s is None:
            cap = FIRST_BATCH_ROWS_PER_PARTITION * floor
        else:
            cap = int(self._rows_per_s * self.target_ms / 1000.0)
            if self._last_cap is not None:
                cap = min(cap, int(self._last_cap * MAX_GROWTH))
        return max(cap, floor)

    def planned(self, rows: int, cap: int) -> None:
        """Record the batch just planned (``rows`` offsets under a ``cap``)."""
        self._last_planned_at = self.clock()
        self._last_planned_rows = rows
        if rows > 0:
            self._last_cap = cap
            logger.info(
                "targetBatchDuration %d ms: planned %d rows (cap %d, throughput %s rows/s)",
                self.target_ms,
                rows,
                cap,
                "unknown" if self._rows_per_s is None else f"{self._rows_per_s:.0f}",
            )
