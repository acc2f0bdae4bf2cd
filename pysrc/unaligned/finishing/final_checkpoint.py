"""The final checkpoint: EndOfData in the source's offsets, and the ``finished`` marker.

A ``format("unaligned")`` source whose every partition reached its end (``endingOffsets``, or
a drain) marks the batch that reads the last records with ``"endOfData": true`` in its offset,
which Spark writes to the offset log before the batch runs. The sink reads it there and makes
that batch the **final checkpoint**:

1. No task cuts: every task replays all the channel state it inherited and writes every row
   (:meth:`unaligned.sink.two_phase_commit.TwoPhaseCommitWriter.write`).
2. The batch is decided and committed through the usual two-phase commit.
3. Once it is done and nothing is pending, the driver writes ``<checkpoint>/unaligned/
   finished.json`` (:func:`mark_finished`): from then on nothing of the query is open anywhere,
   no transaction, no staged file, no channel state.

The query *has finished* (:func:`has_finished`) when that marker names a batch that Spark has
committed (``<checkpoint>/commits/<id>``) and that is the last batch in Spark's offset log. A
query that resumed after a completed drain and read on (see :mod:`.source_side`) makes the
marker stale; its next barrier removes it (:func:`clear_stale_marker`). Whether a batch is
the final checkpoint: :func:`unaligned.barriers.barrier.end_of_data`.
"""

from __future__ import annotations

import json
import logging
import time

from unaligned._checksum import sealed_json, verified
from unaligned._fs import atomic_write, describe, read_bytes
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError

logger = logging.getLogger(__name__)


def mark_finished(checkpoint: Checkpoint, batch_id: int) -> None:
    """Step 3: the final checkpoint ``batch_id`` is done and nothing is pending (idempotent)."""
    document = {"finalBatchId": batch_id, "finishedAtMs": int(time.time() * 1000)}
    atomic_write(checkpoint.finished_marker, sealed_json(document))
    logger.info("final checkpoint %d committed: the query has finished", batch_id)


def finished_batch(checkpoint: Checkpoint) -> int | None:
    """The batch id the ``finished`` marker names, else ``None`` (no marker). A marker that
    fails its checksum or cannot be read is a :class:`CommitLogError` naming the file."""
    location = checkpoint.finished_marker
    data = read_bytes(location)
    if data is None:
        return None
    try:
        document, problem = verified(json.loads(data))
        if problem is None:
            return int(document["finalBatchId"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        problem = f"it is unreadable: {exc!r}"
    raise CommitLogError(f"finished marker {describe(location)}: {problem}")


def clear_stale_marker(checkpoint: Checkpoint, batch_id: int) -> None:
    """Barrier ``batch_id`` (not a final one) committed: a marker naming an earlier batch is
    stale (the query read on after a completed drain) and is removed."""
    final = finished_batch(checkpoint)
    if final is not None and final < batch_id:
        remove_marker(checkpoint)
        logger.info("query reads on after its final checkpoint %d: marker removed", final)


def remove_marker(checkpoint: Checkpoint) -> None:
    """Remove the ``finished`` marker, if there is one."""
    location = checkpoint.finished_marker
    try:
        location.filesystem.delete_file(location.path)
    except FileNotFoundError:
        pass


def at_rest(checkpoint: Checkpoint) -> bool:
    """Whether every batch Spark planned has been committed (no batch runs or waits to)."""
    last = checkpoint.last_logged_batch()
    return last is None or checkpoint.spark_committed(last)


def has_finished(checkpoint: Checkpoint) -> bool:
    """Whether the query's final checkpoint has committed and no batch came after it."""
    final = finished_batch(checkpoint)
    return (
        final is not None
        and final == checkpoint.last_logged_batch()
        and checkpoint.spark_committed(final)
    )
