"""Kafka partitions as this package names them: :class:`TopicPartitionId`.

kafka-python has its own ``TopicPartitionId``; ours is a plain sortable value used in offsets,
ranges and decoded columns, and is converted at the kafka-python boundary
(:mod:`unaligned.kafka.clients.connections`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class TopicPartitionId(NamedTuple):
    """One Kafka partition. Sorts by topic, then partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def format_partitions(tps: Iterable[TopicPartitionId]) -> str:
    """``t-0, t-1`` in sorted order, for error messages."""
    return ", ".join(str(tp) for tp in sorted(tps)) or "(none)"
