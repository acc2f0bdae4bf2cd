"""What a table commit says about its batch: query, batch and the Kafka offsets it read.

:func:`batch_summary` builds the string properties each table commit carries (Iceberg's
snapshot summary, Delta's commit info): ``unaligned.queryId``, ``unaligned.batchId`` and
``unaligned.kafkaOffsets``, the JSON ``{"<topic>": {"<partition>": [from, to]}}`` of every
``format("unaligned")`` source of the batch, read from Spark's offset log (the batch's end
offsets, and the previous batch's as its start; ``from`` is ``null`` for the first batch). A
source of another kind is left out; an offset log that cannot be read leaves the offsets out
(the commit still happens: they describe the batch, they do not decide it).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import Checkpoint
from unaligned.errors import BarrierError

logger = logging.getLogger(__name__)

QUERY_KEY = "unaligned.queryId"
BATCH_KEY = "unaligned.batchId"
OFFSETS_KEY = "unaligned.kafkaOffsets"


def _positions(checkpoint: Checkpoint, batch_id: int) -> dict[str, dict[str, int]]:
    positions: dict[str, dict[str, int]] = {}
    for source in read_offset_log(checkpoint, batch_id).sources:
        offset: Any = source.offset
        if isinstance(offset, dict) and isinstance(offset.get("offsets"), dict):
            for topic, partitions in offset["offsets"].items():
                if isinstance(partitions, dict):
                    positions.setdefault(str(topic), {}).update(
                        {str(p): int(o) for p, o in partitions.items()}
                    )
    return positions


def kafka_offsets(checkpoint: Checkpoint, batch_id: int) -> dict[str, dict[str, list[int | None]]]:
    """``{topic: {partition: [from, to]}}`` of the batch's Kafka sources."""
    end = _positions(checkpoint, batch_id)
    try:
        start = _positions(checkpoint, batch_id - 1) if batch_id > 0 else {}
    except BarrierError:  # the previous entry was purged by Spark
        start = {}
    return {
        topic: {
            p: [start.get(topic, {}).get(p), o]
            for p, o in sorted(parts.items(), key=lambda x: int(x[0]))
        }
        for topic, parts in sorted(end.items())
    }


def batch_summary(checkpoint: Checkpoint, query_id: str, batch_id: int) -> dict[str, str]:
    summary = {QUERY_KEY: query_id, BATCH_KEY: str(batch_id)}
    try:
        offsets = kafka_offsets(checkpoint, batch_id)
    except (BarrierError, ValueError) as exc:
        logger.warning(
            "batch %d: its Kafka offsets stay out of the table commit: %s", batch_id, exc
        )
        return summary
    if offsets:
        summary[OFFSETS_KEY] = json.dumps(offsets, separators=(",", ":"))
    return summary
