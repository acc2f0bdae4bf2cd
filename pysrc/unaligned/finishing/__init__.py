"""The finishing protocol (Flink FLIP-147): a query that ends leaves nothing open.

What the source does with a stop request (hold at a barrier, or drain to a frozen end) is
:mod:`unaligned.source.stopping`; what the sink does after the final checkpoint,
:mod:`unaligned.sink.barrier_outcome`.

- :mod:`.final_checkpoint`: EndOfData in the source's offsets, the final checkpoint and the
  ``finished`` marker under the checkpoint.
- :mod:`.stop_request`: a stop request recorded under the checkpoint (from any host), and the
  driver-local link through which the source finds it.
- :mod:`.heartbeat`: the source's heartbeat under the checkpoint (is the query running?).
- :mod:`.waiting`: what users call: :func:`await_finished` and :func:`stop`; ``unaligned stop``.
"""

from __future__ import annotations

from unaligned.finishing.final_checkpoint import finished_batch, has_finished, mark_finished
from unaligned.finishing.waiting import await_finished, stop

__all__ = [
    "await_finished",
    "finished_batch",
    "has_finished",
    "mark_finished",
    "stop",
]
