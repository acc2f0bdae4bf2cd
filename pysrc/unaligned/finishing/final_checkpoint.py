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
marker stale; its next barrier removes it (:func:`clear_stale_marker`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from unaligned._checksum import sealed_json, verified
from unaligned._fs import (
    Location,
    atomic_write,
    describe,
    numbered_files,
    read_bytes,
    resolve_location,
)
from unaligned.barriers.offset_log import OFFSETS_DIR
from unaligned.errors import CommitLogError

logger = logging.getLogger(__name__)

END_OF_DATA_KEY = "endOfData"
FINISHED_FILE = ("unaligned", "finished.json")
SPARK_COMMITS_DIR = "commits"


def end_of_data(source_offsets: list[Any]) -> bool:
    """True when every ``format("unaligned")`` source of a batch (an offset with a
    ``barrierToken``) says ``endOfData``, and there is at least one."""
    ours = [o for o in source_offsets if isinstance(o, dict) and "barrierToken" in o]
    return bool(ours) and all(o.get(END_OF_DATA_KEY) is True for o in ours)


def _marker(checkpoint_location: str) -> Location:
    return resolve_location(checkpoint_location).child(*FINISHED_FILE)


def mark_finished(checkpoint_location: str, batch_id: int) -> None:
    """Step 3: the final checkpoint ``batch_id`` is done and nothing is pending (idempotent)."""
    document = {"finalBatchId": batch_id, "finishedAtMs": int(time.time() * 1000)}
    atomic_write(_marker(checkpoint_location), sealed_json(document))
    logger.info("final checkpoint %d committed: the query has finished", batch_id)


def finished_batch(checkpoint_location: str) -> int | None:
    """The batch id the ``finished`` marker names, else ``None`` (no marker). A marker that
    fails its checksum or cannot be read is a :class:`CommitLogError` naming the file."""
    location = _marker(checkpoint_location)
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


def clear_stale_marker(checkpoint_location: str, batch_id: int) -> None:
    """Barrier ``batch_id`` (not a final one) committed: a marker naming an earlier batch is
    stale (the query read on after a completed drain) and is removed."""
    final = finished_batch(checkpoint_location)
    if final is not None and final < batch_id:
        remove_marker(checkpoint_location)
        logger.info("query reads on after its final checkpoint %d: marker removed", final)


def remove_marker(checkpoint_location: str) -> None:
    """Remove the ``finished`` marker, if there is one."""
    location = _marker(checkpoint_location)
    try:
        location.filesystem.delete_file(location.path)
    except FileNotFoundError:
        pass


def spark_committed(checkpoint_location: str, batch_id: int) -> bool:
    """Whether Spark's commit log holds ``batch_id`` (the batch ran to its end)."""
    location = resolve_location(checkpoint_location).child(SPARK_COMMITS_DIR, str(batch_id))
    return read_bytes(location) is not None


def last_logged_batch(checkpoint_location: str) -> int | None:
    """The highest batch id in Spark's offset log (planned, maybe not run), or ``None``."""
    ids = numbered_files(resolve_location(checkpoint_location).child(OFFSETS_DIR), "")
    return ids[-1] if ids else None


def at_rest(checkpoint_location: str) -> bool:
    """Whether every batch Spark planned has been committed (no batch runs or waits to)."""
    last = last_logged_batch(checkpoint_location)
    return last is None or spark_committed(checkpoint_location, last)


def has_finished(checkpoint_location: str) -> bool:
    """Whether the query's final checkpoint has committed and no batch came after it."""
    final = finished_batch(checkpoint_location)
    return (
        final is not None
        and final == last_logged_batch(checkpoint_location)
        and spark_committed(checkpoint_location, final)
    )
