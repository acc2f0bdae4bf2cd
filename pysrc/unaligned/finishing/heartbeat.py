"""The source's heartbeat under the checkpoint: is the query running right now?

``<checkpoint>/unaligned/source-heartbeat.json``::

    {"barrierToken": "<token>", "atMs": 1700000000000}

The driver-side reader of a ``format("unaligned")`` source (one per query run, in Spark's source
runner process) refreshes it every :data:`INTERVAL_S` from a daemon thread, also while a long
batch runs (Spark asks the source nothing then). It finds the checkpoint through the
driver-local link from its barrier token (:mod:`.stop_request`), so it writes only once the
sink's first commit or a stopper on the same host linked the token. When the query stops or its
driver dies, the thread dies with the process and the file goes stale.

``unaligned stop`` (:func:`unaligned.finishing.waiting.stop_from_elsewhere`) reads it to tell a
query that is not running from one running but not at a barrier yet: a heartbeat that does not
change for :data:`STALE_S` (by the stopper's own clock) means not running. :func:`beating`
compares the time in the file with this host's clock instead (for tests and tools on the
driver host). Writing is best effort: a failed
write is logged at debug level and tried again at the next tick.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

from unaligned._util.fs import atomic_write, read_bytes
from unaligned.barriers.idle import hint_dir
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.stop_request import LinkedCheckpoints

logger = logging.getLogger(__name__)

INTERVAL_S = 2.0
STALE_S = 10.0
"""A heartbeat older than this says the query's source is not running."""


@dataclass(frozen=True)
class Heartbeat:
    token: str
    at_ms: int

    def age_s(self, now_s: float) -> float:
        return now_s - self.at_ms / 1000


def write_heartbeat(checkpoint: Checkpoint, token: str) -> None:
    """Refresh the heartbeat; nothing when the checkpoint is gone (never recreate one)."""
    if not checkpoint.has_metadata():
        return
    document = {"barrierToken": token, "atMs": int(time.time() * 1000)}
    atomic_write(checkpoint.source_heartbeat, json.dumps(document).encode())


def read_heartbeat(checkpoint: Checkpoint) -> Heartbeat | None:
    """The last heartbeat, or ``None`` (never written, or unreadable)."""
    data = read_bytes(checkpoint.source_heartbeat)
    if data is None:
        return None
    try:
        document = json.loads(data)
        return Heartbeat(str(document["barrierToken"]), int(document["atMs"]))
    except (ValueError, KeyError, TypeError):
        return None


def beating(checkpoint: Checkpoint, now_s: float | None = None) -> bool:
    """Whether the query's source wrote its heartbeat within :data:`STALE_S`."""
    heartbeat = read_heartbeat(checkpoint)
    now = time.time() if now_s is None else now_s
    return heartbeat is not None and heartbeat.age_s(now) < STALE_S


class SourceHeartbeat:
    """The daemon thread of one driver-side reader; :meth:`watch` starts it once."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._token: str | None = None
        self._links: LinkedCheckpoints | None = None
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict[str, object]:
        """Pickles without the thread (Spark pickles the stream reader into its read tasks);
        a copy starts its own thread at its first :meth:`watch`."""
        return {**self.__dict__, "_token": None, "_links": None, "_thread": None}

    def watch(self, token: str | None) -> None:
        """Beat for the query of ``token`` (the first token seen; later calls change nothing)."""
        if token is None or self._thread is not None:
            return
        self._token = token
        self._links = LinkedCheckpoints(hint_dir())  # the process's, as it is now
        self._thread = threading.Thread(
            target=self._run, name="unaligned-source-heartbeat", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        token, links = self._token, self._links
        if token is None or links is None:
            return
        while True:
            try:
                checkpoint = links.get(token)
            except Exception as exc:  # noqa: BLE001 - liveness only, never fatal
                logger.debug("heartbeat link of %s unreadable: %r", token, exc)
                checkpoint = None
            if checkpoint is not None:
                try:
                    write_heartbeat(checkpoint, token)
                except Exception as exc:  # noqa: BLE001 - liveness only, never fatal
                    logger.debug("heartbeat under %s not written: %r", checkpoint.location, exc)
            time.sleep(self._interval_s)
