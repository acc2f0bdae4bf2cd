"""How many rows a sink task writes between two looks at its barrier's deadline.

A task notices the deadline only between chunks (:mod:`unaligned.barriers.alignment`), so near
the deadline chunks must be small; ``chunkRows`` is the smallest chunk and the granularity of a
cut. But every chunk also has a fixed cost: routing, one encoding pass, waking the producer's
I/O thread, one more produce request: with 100-byte records on the embedded broker, the Kafka
sink's task writer took 1.5 µs of CPU a record in 1,000-row chunks and 0.85 µs in 10,000-row
ones. A task far from its deadline therefore writes bigger chunks.

The rule, for one task at one barrier (:class:`ChunkSizer`):

- A task that cannot cut (``aligned`` mode, the final checkpoint, too much pending state, no
  idle barriers: ``deadline is None``) writes each input batch whole. Spark hands the sink its
  input in Arrow batches of at most ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows
  (10,000 by default).
- A task that can cut writes ``chunkRows`` rows first. Each next chunk has as many rows as the
  task is expected to write in a quarter of the time left before the deadline, at the rate it
  has written so far (rows over the seconds spent in writing them, the waits for
  ``maxUnacknowledgedBytes`` included), never fewer than ``chunkRows``, never more than twice
  the largest chunk so far (slow start) and never more than the rest of the input batch.

The slow start is there because the first chunks' rate flatters: the producer's buffer takes
them at once, and a broker quota throttles the request *after* the one that broke it (the
broker answers and then mutes the connection). Without it, one fast first chunk planned the
rest of the batch as a single chunk and a throttled task could not cut at all; with it, the
slowdown shows in a chunk at most twice as big as one that went through. So a throttled sink
keeps small chunks, a fast one reaches whole batches after a few doublings and stays there
until the deadline comes near, and the cut lands within about one chunk of the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from unaligned.barriers.barrier import Deadline

#: Share of the time left before the deadline that one chunk is planned to take.
PLANNED_SHARE_OF_REMAINING = 0.25
#: A chunk has at most this many times the rows of the largest chunk before it.
MAX_GROWTH = 2


class ChunkSizer:
    """Plans one task's chunks (see the module docstring). Use: :meth:`next_rows` before each
    chunk, :meth:`record` after writing it.

    ``min_rows``: ``chunkRows`` (>= 1). ``deadline``: the barrier's deadline, ``None`` when the
    task cannot cut. ``timer``: seconds, for the write rate (a chunk too quick for the timer to
    measure counts as infinitely fast).
    """

    def __init__(
        self,
        min_rows: int,
        deadline: Deadline | None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._min_rows = min_rows
        self._deadline = deadline
        self.timer = timer
        self._rows = 0
        self._seconds = 0.0
        self._largest = 0

    def next_rows(self, available: int) -> int:
        """Rows of the next chunk, with ``available`` (>= 1) rows left in the input batch."""
        if self._deadline is None:
            return available
        if self._rows == 0:
            return min(self._min_rows, available)
        ceiling = max(self._min_rows, MAX_GROWTH * self._largest)
        if self._seconds <= 0.0:  # too fast for the timer to see: nothing near to fear
            return min(ceiling, available)
        rate = self._rows / self._seconds
        planned = int(rate * self._deadline.remaining_s() * PLANNED_SHARE_OF_REMAINING)
        return min(max(planned, self._min_rows), ceiling, available)

    def record(self, rows: int, seconds: float) -> None:
        """``rows`` were written in ``seconds`` (the write and any wait it caused)."""
        self._rows += rows
        self._seconds += max(0.0, seconds)
        self._largest = max(self._largest, rows)
