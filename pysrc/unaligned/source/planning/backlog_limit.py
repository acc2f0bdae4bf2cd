"""The source slows down while the sink's pending channel state grows (backpressure).

An unaligned barrier cuts on time however slow the sink is: what the sink could not write
becomes channel state, written first by the next barrier. If the sink stays slower than the
input, every barrier adds to that state; merging keeps it a few files per task
(:mod:`unaligned.barriers.alignment`, step 3a), but the rows themselves would pile up until
``maxInflightBytes``. So the source reads the pending rows each barrier left (the sink's
idle-barrier hint, :mod:`unaligned.barriers.idle`) and sizes the next batch by them, additive
increase and multiplicative decrease as TCP does:

- the pending rows grew over the last barrier: the next batch takes at most half the rows of
  the last one (at least :data:`MIN_ROWS_PER_PARTITION` per partition with backlog);
- they did not grow: the cap doubles;
- nothing is pending: no cap.

Only a batch size the engine lets the source choose is capped (a ``ReadMaxRows`` limit; the
source's default read limit is one, uncapped, so that this applies without
``maxOffsetsPerTrigger``); Spark's ``ReadAllAvailable`` (``Trigger.Once``) still reads all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from unaligned.barriers.idle import PendingHint

logger = logging.getLogger(__name__)

MIN_ROWS_PER_PARTITION = 100


@dataclass
class BacklogLimit:
    """The source's view of the sink's backlog (one per reader; module docstring)."""

    _seen_batch: int | None = field(default=None, init=False)
    _pending_rows: int = field(default=0, init=False)
    _cap: int | None = field(default=None, init=False)
    _last_planned: int = field(default=0, init=False)

    def cap(self, hint: PendingHint | None, partitions_with_backlog: int) -> int | None:
        """At most this many rows in the next batch (``None``: no cap), from the hint the sink
        published after its last barrier."""
        if hint is None or hint.pending_rows <= 0:
            self._pending_rows, self._cap = 0, None
            return None
        if hint.batch_id != self._seen_batch:
            self._seen_batch = hint.batch_id
            floor = MIN_ROWS_PER_PARTITION * max(partitions_with_backlog, 1)
            if hint.pending_rows > self._pending_rows and self._last_planned > 0:
                self._cap = max(floor, self._last_planned // 2)
                logger.info(
                    "the sink's pending channel state grew to %d rows at barrier %d: the next "
                    "batch reads at most %d rows",
                    hint.pending_rows,
                    hint.batch_id,
                    self._cap,
                )
            elif self._cap is not None:
                self._cap = self._cap * 2
            self._pending_rows = hint.pending_rows
        return self._cap

    def planned(self, rows: int) -> None:
        """Record the rows of the batch just planned (an idle batch plans none)."""
        if rows > 0:
            self._last_planned = rows
