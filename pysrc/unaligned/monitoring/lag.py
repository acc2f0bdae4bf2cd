"""How far a query is behind the latest offsets, from its progress (Spark's own figures).

Spark's Kafka source reports ``minOffsetsBehindLatest`` / ``avgOffsetsBehindLatest`` /
``maxOffsetsBehindLatest`` through a JVM-only metrics hook that Python sources do not get. The
same figures follow from what every progress report holds: a ``format("unaligned")`` source's
``endOffset`` (the next offset to read after the batch, per partition) and its ``latestOffset``
(the latest offsets the source saw when it planned the batch, from ``reportLatestOffset``).
Per partition, *behind* is ``latest - end`` (never below 0); a partition the batch did not reach
yet counts from 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OffsetsBehind:
    """Records not yet read, over the partitions of a query's ``format("unaligned")`` sources."""

    min: int
    avg: float
    max: int
    partitions: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "minOffsetsBehindLatest": self.min,
            "avgOffsetsBehindLatest": self.avg,
            "maxOffsetsBehindLatest": self.max,
            "partitions": self.partitions,
        }


def _parsed(value: object) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _positions(offset: object) -> dict[tuple[str, str], int] | None:
    """``{(topic, partition): offset}`` of one of our offsets, or ``None`` (another source)."""
    parsed = _parsed(offset)
    if not isinstance(parsed, Mapping) or "idleBarrier" not in parsed:
        return None
    offsets = parsed.get("offsets")
    if not isinstance(offsets, Mapping):
        return None
    return {
        (str(topic), str(partition)): int(position)
        for topic, per_partition in offsets.items()
        if isinstance(per_partition, Mapping)
        for partition, position in per_partition.items()
    }


def offsets_behind(sources: Iterable[Mapping[str, Any]]) -> OffsetsBehind | None:
    """The figures over the ``sources`` of one progress report (``progress["sources"]``), or
    ``None`` when none of them is a ``format("unaligned")`` source with a latest offset."""
    behind: list[int] = []
    for source in sources:
        latest = _positions(source.get("latestOffset"))
        if latest is None:
            continue
        end = _positions(source.get("endOffset")) or {}
        behind += [max(0, position - end.get(tp, 0)) for tp, position in latest.items()]
    if not behind:
        return None
    return OffsetsBehind(min(behind), round(sum(behind) / len(behind), 1), max(behind), len(behind))
