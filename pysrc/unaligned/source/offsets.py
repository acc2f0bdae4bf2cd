"""Kafka positions: the source's checkpointed offset (:class:`KafkaSourceOffset`).

Every offset here is a *next offset to read* position. The offset Spark writes to its offset
log for this source is ``{"offsets": {topic: {partition: position}}, "idleBarrier": n,
"barrierToken": ...}`` with the optional keys ``queryStart``, ``readTasks``, ``topicIds``,
``layoutDrain``, ``splitRanges``, and, for bounded input, ``ending``, ``finished``,
``endOfData`` and ``drained``. What each key is for: ARCHITECTURE.md, "Module notes",
``source/offsets.py``. Ranges and read limits are :mod:`unaligned.source.planning.offset_ranges`;
the JSON options (``assign``, ``startingOffsets``...) :mod:`unaligned.source.offset_options`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from unaligned.errors import OffsetFormatError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offset_options import partition_number, whole_number

logger = logging.getLogger(__name__)


# --- the checkpointed source offset ----------------------------------------------------------


@dataclass(frozen=True)
class KafkaSourceOffset:
    """The source's offset: the next offset to read for every known partition.

    ``positions`` holds, per topic-partition, the first offset NOT yet covered by the batches up
    to this offset. ``idle_barrier`` counts forced idle-barrier batches (see module docstring).
    """

    positions: Mapping[TopicPartitionId, int] = field(default_factory=dict)
    idle_barrier: int = 0
    barrier_token: str | None = None
    """Names this query's idle-barrier hint; ``None`` only in offsets written without one."""
    query_start: Mapping[TopicPartitionId, int] | None = None
    """Where the query started (next offset to read per partition): set on the initial offset
    and on the end offset of the first batch, ``None`` on every later offset."""
    ending: Mapping[TopicPartitionId, int] | None = None
    """Bounded input: the exclusive end per partition, fixed when the query first started
    (or frozen by a drain); ``None``: unbounded."""
    drained: bool = False
    """Whether ``ending`` was frozen by a drain (:mod:`unaligned.source.stopping`)."""
    read_tasks: int | None = None
    """Read tasks of the batch that ends at this offset (the query's first count, or a new
    ``readTasks`` once a layout drain passed); ``None``: one task per topic-partition (offsets
    written before the count was recorded)."""
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    """Kafka's topic id of each topic when this offset was planned (KIP-516): a topic deleted
    and re-created under the same name has another id. Empty in offsets written without."""
    split_ranges: bool = False
    """``minPartitions`` / ``maxRecordsPerPartition`` split the batch's ranges into one task per
    piece: no stable task layout (:mod:`unaligned.source.planning.task_layout`)."""
    layout_drain: bool = False
    """The batch ending here is a layout drain (:mod:`unaligned.source.planning.task_layout`): it
    reads nothing, at the previous batch's task layout, and the sink cuts nothing in it."""

    @classmethod
    def initial(
        cls,
        positions: Mapping[TopicPartitionId, int],
        barrier_token: str,
        ending: Mapping[TopicPartitionId, int] | None = None,
        read_tasks: int | None = None,
    ) -> KafkaSourceOffset:
        """A new query's start offset: it records its own positions as the query start, the
        resolved ends of a bounded query, and the read-task count."""
        return cls(
            positions,
            0,
            barrier_token,
            dict(positions),
            None if ending is None else dict(ending),
            read_tasks=read_tasks,
        )

    def finished(self) -> set[TopicPartitionId]:
        """Partitions of a bounded query whose position reached their end (or that no longer
        have a position: gone, with failOnDataLoss=false)."""
        if self.ending is None:
            return set()
        return {
            tp
            for tp, end in self.ending.items()
            if tp not in self.positions or self.positions[tp] >= end
        }

    def end_of_data(self) -> bool:
        """A bounded query whose every partition is finished."""
        return self.ending is not None and len(self.finished()) == len(self.ending)

    def bounded(self, latest: Mapping[TopicPartitionId, int]) -> dict[TopicPartitionId, int]:
        """A bounded query's latest positions: only the partitions of ``ending``, none past its
        end, and finished partitions where they are (never looked at again)."""
        assert self.ending is not None
        finished = self.finished()
        result: dict[TopicPartitionId, int] = {}
        for tp, end in self.ending.items():
            if tp in finished:
                if tp in self.positions:
                    result[tp] = self.positions[tp]
            elif tp in latest:
                result[tp] = min(latest[tp], end)
        return result

    def next(
        self,
        positions: Mapping[TopicPartitionId, int],
        idle_barrier: int,
        read_tasks: int | None = None,
    ) -> KafkaSourceOffset:
        """The end offset of a batch that starts at this offset. It keeps the token, keeps
        the query start only when this offset is the query's start (the first batch), and
        keeps the read-task count unless given another (``read_tasks``)."""
        return KafkaSourceOffset(
            positions,
            idle_barrier,
            self.barrier_token,
            self.query_start if self.is_query_start() else None,
            self.ending,
            self.drained,
            self.read_tasks if read_tasks is None else read_tasks,
            self.topic_ids,
        )

    def is_query_start(self) -> bool:
        """Whether this is a query's start offset (what ``initialOffset()`` returned)."""
        return self.query_start is not None and dict(self.query_start) == dict(self.positions)

    def batch_start(self, start: KafkaSourceOffset) -> KafkaSourceOffset:
        """The start of the batch that ends at this offset: ``start`` as Spark passed it, or,
        when this is the end of the first batch, the query start recorded when that batch was
        planned (Spark passes a freshly resolved ``initialOffset()`` when it re-runs the first
        batch after a restart)."""
        if (
            self.query_start is None
            or not start.is_query_start()
            or dict(self.query_start) == dict(start.positions)
        ):
            return start
        logger.info(
            "re-running the first batch: reading from the recorded query start %s, not from the "
            "re-resolved initial offset %s",
            dict(self.query_start),
            dict(start.positions),
        )
        return replace(
            start,
            positions=self.query_start,
            query_start=self.query_start,
            ending=self.ending,
            drained=self.drained,
            read_tasks=self.read_tasks,
        )

    def to_json(self) -> dict[str, Any]:
        """Deterministic JSON-able dict: topics sorted, partitions in numeric order."""
        result: dict[str, Any] = {
            "offsets": _positions_json(self.positions),
            "idleBarrier": self.idle_barrier,
        }
        if self.barrier_token is not None:
            result["barrierToken"] = self.barrier_token
        if self.query_start is not None:
            result["queryStart"] = _positions_json(self.query_start)
        if self.ending is not None:
            result["ending"] = _positions_json(self.ending)
            finished: dict[str, list[int]] = {}
            for tp in sorted(self.finished()):
                finished.setdefault(tp.topic, []).append(tp.partition)
            result["finished"] = finished
            if self.end_of_data():
                result["endOfData"] = True
            if self.drained:
                result["drained"] = True
        if self.read_tasks is not None:
            result["readTasks"] = self.read_tasks
        if self.topic_ids:
            result["topicIds"] = dict(sorted(self.topic_ids.items()))
        if self.split_ranges:
            result[SPLIT_RANGES_KEY] = True
        if self.layout_drain:
            result[LAYOUT_DRAIN_KEY] = True
        return result

    @classmethod
    def from_json(cls, value: object, what: str) -> KafkaSourceOffset:
        """Parse a dict (or JSON text) written by :meth:`to_json`; ``what`` names it in errors."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise OffsetFormatError(f"{what} is not valid JSON ({exc}): {value!r}") from exc
        if not isinstance(value, dict) or set(value) - _OPTIONAL_KEYS != {"offsets", "idleBarrier"}:
            raise OffsetFormatError(
                f'{what} must look like {{"offsets": {{"topic": {{"0": 23}}}}, "idleBarrier": 0}}, '
                f"got {value!r}"
            )
        barrier = value["idleBarrier"]
        if isinstance(barrier, bool) or not isinstance(barrier, int) or barrier < 0:
            raise OffsetFormatError(
                f"{what}: idleBarrier must be a whole number >= 0, got {barrier!r}"
            )
        positions = _positions_from_json(value["offsets"], what, "offsets")
        token = value.get("barrierToken")
        if token is not None and (not isinstance(token, str) or not token.isalnum()):
            raise OffsetFormatError(
                f"{what}: barrierToken must be an alphanumeric string, got {token!r}"
            )
        query_start = (
            _positions_from_json(value["queryStart"], what, "queryStart")
            if "queryStart" in value
            else None
        )
        ending = (
            _positions_from_json(value["ending"], what, "ending") if "ending" in value else None
        )
        end_of_data = value.get("endOfData", False)
        drained = value.get("drained", False)
        layout_drain = value.get(LAYOUT_DRAIN_KEY, False)
        split = value.get(SPLIT_RANGES_KEY, False)
        if not all(isinstance(flag, bool) for flag in (end_of_data, drained, layout_drain, split)):
            raise OffsetFormatError(
                f"{what}: endOfData, drained, {LAYOUT_DRAIN_KEY} and {SPLIT_RANGES_KEY} must be "
                f"true or false, got {value!r}"
            )
        if ending is None and ("finished" in value or end_of_data or drained):
            raise OffsetFormatError(
                f"{what}: finished / endOfData / drained without ending: {value!r}"
            )
        read_tasks = value.get("readTasks")
        if read_tasks is not None and (
            isinstance(read_tasks, bool) or not isinstance(read_tasks, int) or read_tasks < 1
        ):
            raise OffsetFormatError(
                f"{what}: readTasks must be a whole number >= 1, got {read_tasks!r}"
            )
        topic_ids = value.get("topicIds", {})
        if not isinstance(topic_ids, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in topic_ids.items()
        ):
            raise OffsetFormatError(
                f"{what}: topicIds must map topic names to ids, got {topic_ids!r}"
            )
        return cls(
            positions,
            barrier,
            token,
            query_start,
            ending,
            drained,
            read_tasks,
            topic_ids,
            split,
            layout_drain,
        )


LAYOUT_DRAIN_KEY = "layoutDrain"
SPLIT_RANGES_KEY = "splitRanges"
"""Offset keys the sink reads from Spark's offset log (:mod:`unaligned.barriers.barrier`, which
spells them too: it sits below the source)."""

_OPTIONAL_KEYS = frozenset(
    {
        LAYOUT_DRAIN_KEY,
        SPLIT_RANGES_KEY,
        "barrierToken",
        "queryStart",
        "ending",
        "finished",
        "endOfData",
        "drained",
        "readTasks",
        "topicIds",
    }
)


def _positions_json(positions: Mapping[TopicPartitionId, int]) -> dict[str, dict[str, int]]:
    offsets: dict[str, dict[str, int]] = {}
    for tp in sorted(positions):
        offsets.setdefault(tp.topic, {})[str(tp.partition)] = int(positions[tp])
    return offsets


def _positions_from_json(offsets: object, what: str, key: str) -> dict[TopicPartitionId, int]:
    if not isinstance(offsets, dict):
        raise OffsetFormatError(f"{what}: {key} must be an object keyed by topic, got {offsets!r}")
    positions: dict[TopicPartitionId, int] = {}
    for topic, per_partition in offsets.items():
        if not isinstance(per_partition, dict) or not topic:
            raise OffsetFormatError(
                f"{what}: topic {topic!r} must map to an object of partition -> offset"
            )
        for raw_partition, raw_offset in per_partition.items():
            tp = TopicPartitionId(topic, partition_number(raw_partition, what, topic))
            offset = whole_number(raw_offset, what, tp)
            if offset < 0:
                raise OffsetFormatError(f"{what}: offset {offset} for {tp} is negative")
            positions[tp] = offset
    return positions
