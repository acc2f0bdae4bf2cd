"""A produce session's batches and per-partition queues.

:mod:`unaligned.kafka.produce.produce_requests` sends; this module owns the data it sends:

- :class:`QueuedBatch`: one encoded batch with its base sequence, deadline and, for error
  messages, where its records came from (:data:`RecordOrigin`);
- :class:`PartitionQueue`: a partition's batches queued, in flight and to retry;
- :func:`split_refused`: a batch the broker refused as too large, as two batches sent in its
  place (:mod:`unaligned.kafka.produce.batch_split`).

What an answer means is :mod:`unaligned.kafka.produce.produce_answers`; the sending rules are in
:mod:`unaligned.kafka.produce.produce_requests`; ARCHITECTURE.md ("The two-phase commit") has
the protocol.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from unaligned.kafka.produce.batch_split import split_batch
from unaligned.kafka.transactions.coordinator_requests import FIRST_BACKOFF_S

RecordOrigin = Callable[[int], str]
"""Where record ``i`` of a chunk came from, in words (e.g. "input row 512 of the task")."""


@dataclass(frozen=True)
class QueuedBatch:
    """One encoded batch (producer fields set) and what it counts for. ``origin`` and
    ``first_record``: its first record is record ``first_record`` of ``origin``."""

    topic: str
    partition: int
    data: bytes
    record_count: int
    payload_bytes: int
    base_sequence: int
    deadline: float  # time.monotonic() after which it is not sent again
    origin: RecordOrigin | None = None
    first_record: int = 0


@dataclass
class PartitionQueue:
    """A partition's batches on the I/O thread: queued (to send, in sequence order), in flight,
    and failed retriably (sent again once nothing is in flight)."""

    topic: str
    partition: int
    leader: int | None = None
    added: bool = False
    queued: deque[QueuedBatch] = field(default_factory=deque)
    in_flight: list[QueuedBatch] = field(default_factory=list)
    to_retry: list[QueuedBatch] = field(default_factory=list)
    backoff_s: float = FIRST_BACKOFF_S
    failure: BaseException | None = None


def split_refused(batch: QueuedBatch) -> tuple[QueuedBatch, QueuedBatch]:
    """The two batches sent instead of ``batch`` (refused as too large; two records or more):
    the same base sequence, record count and payload bytes between them."""
    first, second, half = split_batch(batch.data)
    share = batch.payload_bytes * len(first) // (len(first) + len(second))
    return (
        replace(batch, data=first, record_count=half, payload_bytes=share),
        replace(
            batch,
            data=second,
            record_count=batch.record_count - half,
            payload_bytes=batch.payload_bytes - share,
            base_sequence=-1 if batch.base_sequence < 0 else batch.base_sequence + half,
            first_record=batch.first_record + half,
        ),
    )
