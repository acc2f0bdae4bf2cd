"""The finishing protocol (Flink FLIP-147): bounded input ends with one final checkpoint.

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

Spark ends a query by itself only under ``trigger(availableNow=True)``. Under any trigger,
:func:`await_finished` waits for the final checkpoint and stops the query; a query restarted
from a finished checkpoint finishes again at once.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from unaligned._fs import atomic_write, read_bytes, resolve_location

logger = logging.getLogger(__name__)

END_OF_DATA_KEY = "endOfData"
FINISHED_FILE = ("unaligned", "finished.json")
SPARK_COMMITS_DIR = "commits"
_POLL_S = 0.2


def end_of_data(source_offsets: list[Any]) -> bool:
    """True when every ``format("unaligned")`` source of a batch (an offset with a
    ``barrierToken``) says ``endOfData``, and there is at least one."""
    ours = [o for o in source_offsets if isinstance(o, dict) and "barrierToken" in o]
    return bool(ours) and all(o.get(END_OF_DATA_KEY) is True for o in ours)


def mark_finished(checkpoint_location: str, batch_id: int) -> None:
    """Step 3: the final checkpoint ``batch_id`` is done and nothing is pending (idempotent)."""
    location = resolve_location(checkpoint_location).child(*FINISHED_FILE)
    document = {"finalBatchId": batch_id, "finishedAtMs": int(time.time() * 1000)}
    atomic_write(location, json.dumps(document).encode())
    logger.info("final checkpoint %d committed: the query has finished", batch_id)


def finished_batch(checkpoint_location: str) -> int | None:
    """The final checkpoint's batch id once the query has finished, else ``None``."""
    data = read_bytes(resolve_location(checkpoint_location).child(*FINISHED_FILE))
    if data is None:
        return None
    return int(json.loads(data)["finalBatchId"])


def _spark_committed(checkpoint_location: str, batch_id: int) -> bool:
    location = resolve_location(checkpoint_location).child(SPARK_COMMITS_DIR, str(batch_id))
    return read_bytes(location) is not None


def await_finished(query: Any, checkpoint_location: str, timeout_s: float | None = None) -> bool:
    """Wait until the query's final checkpoint has committed, then stop the query.

    ``query`` is the ``StreamingQuery``; ``checkpoint_location`` its ``checkpointLocation``.
    Returns ``True`` once the query has finished (and is stopped), ``False`` if ``timeout_s``
    passed first (the query keeps running). A query that fails raises its exception, as
    ``awaitTermination`` does.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        final = finished_batch(checkpoint_location)
        if final is not None and _spark_committed(checkpoint_location, final):
            query.stop()
            return True
        if not query.isActive:
            query.awaitTermination()  # raises the query's exception, if it failed
            return finished_batch(checkpoint_location) is not None
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)
