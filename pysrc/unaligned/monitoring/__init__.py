"""Watching a query where Spark users look: offsets behind latest and barrier figures.

- :mod:`.lag`: offsets behind latest (min, avg, max over partitions) from a progress report.
- :mod:`.listener`: the ``StreamingQueryListener`` (``unaligned.monitor(spark)``) that reports
  them with the barrier figures of each batch.

Consumer-group offsets for Kafka's own lag tools are the source's
(:mod:`unaligned.source.group_offsets`).
"""

from __future__ import annotations

from unaligned.monitoring.lag import OffsetsBehind, offsets_behind
from unaligned.monitoring.listener import QueryFigures, UnalignedListener, figures_of, monitor

__all__ = [
    "OffsetsBehind",
    "QueryFigures",
    "UnalignedListener",
    "figures_of",
    "monitor",
    "offsets_behind",
]
