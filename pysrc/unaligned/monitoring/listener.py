"""A ``StreamingQueryListener`` with the figures Spark users look for, one call to enable.

``listener = unaligned.monitor(spark)`` adds an :class:`UnalignedListener` to the session. For
every progress report of a query with a ``format("unaligned")`` source or sink it computes
:class:`QueryFigures`: offsets behind latest (min, avg, max over partitions, as Spark's Kafka
source reports them) and the barrier figures of the batch (mode, duration from its start, rows
written, spilled, replayed, channel-state bytes), logs them in one INFO line of
``unaligned.monitoring.listener``, keeps the last ones per query in ``listener.latest`` and
hands them to ``on_progress`` if given.

Where the barrier figures come from: the sink's commit runner writes each barrier's metrics
under the checkpoint (:mod:`unaligned.barriers.metrics`) and links the query id to the
checkpoint in the driver-local hint directory (:func:`unaligned.finishing.stop_request.link`);
the listener, on the same driver, follows the link of the progress report's query id and reads
the record of the report's batch (events arrive late under load: the batch, not the latest
barrier). A listener runs in the driver's Python process; a failure is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from unaligned.barriers.metrics import BarrierMetrics, read_barrier
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.stop_request import linked_location, query_key
from unaligned.monitoring.lag import OffsetsBehind, offsets_behind

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryFigures:
    """A query's figures after batch ``batch_id``."""

    query_id: str
    batch_id: int
    offsets_behind: OffsetsBehind | None
    barrier: BarrierMetrics | None
    """The sink's figures for this barrier; ``None`` without a ``format("unaligned")`` sink."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "queryId": self.query_id,
            "batchId": self.batch_id,
            "offsetsBehindLatest": None
            if self.offsets_behind is None
            else self.offsets_behind.to_dict(),
            "barrier": None if self.barrier is None else self.barrier.to_dict(),
        }

    def describe(self) -> str:
        parts = [f"query {self.query_id} batch {self.batch_id}"]
        if self.offsets_behind is not None:
            lag = self.offsets_behind
            parts.append(f"offsets behind latest min/avg/max {lag.min}/{lag.avg}/{lag.max}")
        if self.barrier is not None:
            b = self.barrier
            parts.append(
                f"barrier {b.mode} in {b.duration_ms} ms: {b.rows_written} rows written, "
                f"{b.rows_spilled} spilled, {b.rows_replayed} replayed, "
                f"{b.bytes_spilled} bytes of channel state"
            )
        return "; ".join(parts)


def figures_of(progress: Mapping[str, Any]) -> QueryFigures | None:
    """The figures of one progress report (``query.lastProgress`` or a listener event's), or
    ``None`` when the query has neither a ``format("unaligned")`` source nor such a sink."""
    query_id = str(progress.get("id"))
    batch_id = int(progress.get("batchId", -1))
    lag = offsets_behind(progress.get("sources") or [])
    location = linked_location(query_key(query_id))
    barrier = None if location is None else read_barrier(Checkpoint.resolve(location), batch_id)
    if lag is None and barrier is None:
        return None
    return QueryFigures(query_id, batch_id, lag, barrier)


class UnalignedListener(StreamingQueryListener):
    """Computes :class:`QueryFigures` for every progress report (see the module docstring)."""

    def __init__(self, on_progress: Callable[[QueryFigures], None] | None = None) -> None:
        self._on_progress = on_progress
        self.latest: dict[str, QueryFigures] = {}

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryProgress(self, event: Any) -> None:
        try:
            figures = figures_of(event.progress)
        except Exception:  # a listener must never break the query's event delivery
            logger.warning("could not compute the query's figures", exc_info=True)
            return
        if figures is None:
            return
        self.latest[figures.query_id] = figures
        logger.info("%s", figures.describe())
        if self._on_progress is not None:
            self._on_progress(figures)

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        return None


def monitor(
    spark: Any, on_progress: Callable[[QueryFigures], None] | None = None
) -> UnalignedListener:
    """Add an :class:`UnalignedListener` to ``spark``'s streaming queries and return it."""
    listener = UnalignedListener(on_progress)
    spark.streams.addListener(listener)
    return listener
