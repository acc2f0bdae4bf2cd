"""A request to stop a running query, ``<checkpoint>/unaligned/stop.json``, and the link
through which the query's source finds it.

``{"drain": true, "requestedAtMs": ..., "honouredBy": "<reader id>", "honouredAtMs": ...,
"completedBatchId": 12}``: written by :func:`unaligned.stop` or ``unaligned stop`` (any host),
``honouredBy`` added by the source that acts on it at a barrier
(:mod:`unaligned.source.stopping`), ``completedBatchId`` by the sink once a drain's final
checkpoint committed. Spark gives a Python source no checkpoint location, so the sink's driver
and the stopper *link* the query's ``barrierToken`` to the checkpoint in the driver-local hint
directory (``<hint dir>/<token>.checkpoint``). The rules: ARCHITECTURE.md, "Finishing".
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from unaligned._util.checksum import sealed_json, verified
from unaligned._util.fs import atomic_write, describe, read_bytes
from unaligned.barriers.idle import hint_dir
from unaligned.checkpoint import Checkpoint

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0


@dataclass(frozen=True)
class StopRequest:
    """Stop the query at its next barrier: with ``drain`` after finishing all input up to the
    latest offsets of that moment (one final checkpoint), else right after that barrier."""

    drain: bool
    requested_at_ms: int
    honoured_by: str | None = None
    """The id of the source reader that acted on it; ``None`` while nobody has."""
    honoured_at_ms: int | None = None
    completed_batch: int | None = None
    """A drain's final checkpoint, once it committed (written by the sink's driver side)."""

    def to_json(self) -> bytes:
        document: dict[str, object] = {"drain": self.drain, "requestedAtMs": self.requested_at_ms}
        if self.honoured_by is not None:
            document["honouredBy"] = self.honoured_by
            document["honouredAtMs"] = self.honoured_at_ms
        if self.completed_batch is not None:
            document["completedBatchId"] = self.completed_batch
        return sealed_json(document)

    @classmethod
    def from_json(cls, data: bytes) -> StopRequest:
        """Raises ``ValueError`` when the file fails its checksum (one without is read)."""
        document, problem = verified(json.loads(data))
        if problem is not None:
            raise ValueError(problem)
        honoured_at = document.get("honouredAtMs")
        completed = document.get("completedBatchId")
        return cls(
            bool(document["drain"]),
            int(document["requestedAtMs"]),
            document.get("honouredBy"),
            None if honoured_at is None else int(honoured_at),
            None if completed is None else int(completed),
        )

    def same_request(self, other: StopRequest) -> bool:
        """Whether ``other`` is this request, honoured or not."""
        return (self.drain, self.requested_at_ms) == (other.drain, other.requested_at_ms)


def request_stop(checkpoint: Checkpoint, drain: bool) -> StopRequest:
    """Record a new stop request (replacing any earlier one) and return it."""
    request = StopRequest(drain, int(time.time() * 1000))
    atomic_write(checkpoint.stop_request, request.to_json())
    logger.info("stop requested (drain=%s) under %s", drain, checkpoint.location)
    return request


def read_request(checkpoint: Checkpoint) -> StopRequest | None:
    """The recorded request, or ``None``. An unreadable file, or one that fails its checksum, is
    ignored with a warning naming it: a damaged request never stops a query."""
    data = read_bytes(checkpoint.stop_request)
    if data is None:
        return None
    try:
        return StopRequest.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.warning("ignoring the stop request %s: %s", describe(checkpoint.stop_request), exc)
        return None


def mark_honoured(checkpoint: Checkpoint, request: StopRequest, reader_id: str) -> StopRequest:
    """The source acts on ``request``: record which reader did (atomic rewrite)."""
    honoured = replace(request, honoured_by=reader_id, honoured_at_ms=int(time.time() * 1000))
    atomic_write(checkpoint.stop_request, honoured.to_json())
    logger.info("stop request honoured (drain=%s) by reader %s", request.drain, reader_id)
    return honoured


def mark_completed(checkpoint: Checkpoint, batch_id: int) -> None:
    """The final checkpoint ``batch_id`` committed: a honoured drain is complete (the sink's
    driver side, finishing step 3)."""
    request = read_request(checkpoint)
    if request is not None and request.drain and request.honoured_by is not None:
        done = replace(request, completed_batch=batch_id)
        atomic_write(checkpoint.stop_request, done.to_json())


def rearm(checkpoint: Checkpoint, request: StopRequest) -> None:
    """The query ended before ``request`` completed: record it again as not yet honoured (if it
    is still the recorded one), so that the next run acts on it at its first barrier."""
    current = read_request(checkpoint)
    if current is not None and current.same_request(request) and current.completed_batch is None:
        atomic_write(
            checkpoint.stop_request,
            StopRequest(request.drain, request.requested_at_ms).to_json(),
        )


def withdraw(checkpoint: Checkpoint, request: StopRequest) -> None:
    """Remove the recorded request if it is still ``request`` (not a newer one)."""
    current = read_request(checkpoint)
    if current is not None and current.same_request(request):
        location = checkpoint.stop_request
        location.filesystem.delete_file(location.path)


# --- the driver-local link from a barrier token (or query id) to its checkpoint ----------------


def query_key(query_id: str) -> str:
    """The link key of a query id (its hex digits: a UUID without dashes)."""
    return query_id.replace("-", "")


def _link_path(token: str, directory: Path | None = None) -> Path:
    if not token.isalnum():
        raise ValueError(f"barrier token {token!r} must be alphanumeric")
    return (hint_dir() if directory is None else directory) / f"{token}.checkpoint"


def link(token: str, checkpoint: Checkpoint) -> None:
    """Tell the source of ``token`` on this host where its query's checkpoint is (also keyed by
    :func:`query_key` for the listener of :mod:`unaligned.monitoring`)."""
    path = _link_path(token)
    try:
        if path.read_text() == checkpoint.location:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
    temp.write_text(checkpoint.location)
    os.replace(temp, path)


def linked_location(token: str, directory: Path | None = None) -> str | None:
    """The checkpoint location linked to ``token`` on this host (in ``directory``, default the
    hint directory of now), or ``None``."""
    try:
        return _link_path(token, directory).read_text() or None
    except OSError:
        return None


class LinkedCheckpoints:
    """The checkpoints linked to barrier tokens on this host, each resolved once per location
    (a source polls its link every second)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._resolved: dict[str, Checkpoint] = {}

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_resolved": {}}

    def get(self, token: str) -> Checkpoint | None:
        """The checkpoint linked to ``token``, or ``None``."""
        location = linked_location(token, self._directory)
        if location is None:
            return None
        checkpoint = self._resolved.get(location)
        if checkpoint is None:
            checkpoint = self._resolved[location] = Checkpoint.resolve(location)
        return checkpoint
