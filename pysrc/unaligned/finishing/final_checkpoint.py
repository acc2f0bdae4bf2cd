"""The final checkpoint's ``finished`` marker, ``<checkpoint>/unaligned/finished.json``.

A batch whose every ``format("unaligned")`` source says EndOfData
(:func:`unaligned.barriers.barrier.end_of_data`) is the final checkpoint: no task cuts, and once
it committed with nothing pending the driver writes the marker (:func:`barrier_committed`,
:func:`mark_finished`). The query *has finished* (:func:`has_finished`) when the marker names a
batch Spark committed that is the last in its offset log; a later barrier (the query read on
after a completed drain, :mod:`unaligned.source.stopping`) removes a stale marker. The protocol:
ARCHITECTURE.md, "Finishing".
"""

from __future__ import annotations

import json
import logging
import time

from unaligned._util.checksum import sealed_json, verified
from unaligned._util.fs import atomic_write, describe, read_bytes
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError
from unaligned.finishing.stop_request import mark_completed

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


def barrier_committed(
    checkpoint: Checkpoint, batch_id: int, *, final: bool, pending_rows: int
) -> None:
    """Barrier ``batch_id`` committed (the sink's driver, step 2f). The final checkpoint with
    nothing pending: step 3, the ``finished`` marker, and a honoured drain is complete. Any
    other barrier: a marker of an earlier final checkpoint is stale."""
    if not final:
        clear_stale_marker(checkpoint, batch_id)
    elif not pending_rows:
        mark_finished(checkpoint, batch_id)
        mark_completed(checkpoint, batch_id)


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
