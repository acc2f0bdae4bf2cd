"""Idle barriers: channel state never waits for new input.

Spark runs a micro-batch only when a source's offset moves. Rows an unaligned barrier left
pending as channel state are written by the *next* barrier, so on a quiet topic they would wait
for the next record. The source therefore emits an *idle barrier* (its offset's ``idleBarrier``
counter goes up with no new records; Spark runs a batch with empty ranges, and every sink task
replays its pending state) whenever the sink says state is pending.

The sink and the source meet on the driver: the sink's ``commit`` runs in a driver process,
the source's ``latestOffset`` in another one, on the same machine. The source's offset JSON
carries a random ``barrierToken`` chosen when the query first started (kept across restarts in
the checkpointed offsets); the sink finds the token in Spark's offset log for its batch and,
after committing the batch, publishes a *pending hint* under that token:
``<hint dir>/<token>.json`` = ``{"batchId": N, "pendingRows": R}``, or removes it when nothing
is pending. The source bumps ``idleBarrier`` once per hint batch id it has not reacted to yet,
so barrier N+1 is requested once for state left by barrier N, and again if N+1 left some.

The hint is for liveness only: correctness never depends on it (pending state is part of the
sink's commit record and is replayed by whatever barrier comes next). The directory is
``$UNALIGNED_IDLE_BARRIER_DIR`` or ``<temp dir>/unaligned-idle-barriers``; a stale hint costs
at most one empty batch.

Liveness never depends on the hint surviving a restart: the hint is on the driver's local disk,
and a query restarted on another host (YARN cluster mode, Kubernetes) finds none. A source
resuming from an offset of an earlier run therefore asks for one idle barrier at the start of
each run (:meth:`IdleBarrierTrigger.start_of_run`), unless the run began by re-planning a batch
of the earlier run (:meth:`IdleBarrierTrigger.batch_planned`). Either way the run's first barrier
reaches the sink, which writes the pending state and, if some is still pending, publishes the
hint again on the new host. A restart with nothing pending costs one empty batch.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

HINT_DIR_ENV = "UNALIGNED_IDLE_BARRIER_DIR"
TOKEN_KEY = "barrierToken"


def new_token() -> str:
    """A fresh barrier token for a query's first offset."""
    return uuid.uuid4().hex


def hint_dir() -> Path:
    configured = os.environ.get(HINT_DIR_ENV)
    return (
        Path(configured) if configured else Path(tempfile.gettempdir()) / "unaligned-idle-barriers"
    )


def _hint_path(token: str) -> Path:
    if not token.isalnum():
        raise ValueError(f"barrier token {token!r} must be alphanumeric")
    return hint_dir() / f"{token}.json"


@dataclass(frozen=True)
class PendingHint:
    """Barrier ``batch_id`` committed with ``pending_rows`` rows of channel state pending."""

    batch_id: int
    pending_rows: int


def publish(token: str, hint: PendingHint | None) -> None:
    """Publish (or, with ``None``, clear) the pending hint of ``token``. Atomic (rename)."""
    path = _hint_path(token)
    if hint is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
    temp.write_text(json.dumps({"batchId": hint.batch_id, "pendingRows": hint.pending_rows}))
    os.replace(temp, path)
    logger.debug("idle-barrier hint %s: %s", token, hint)


def publish_pending(tokens: Iterable[str], batch_id: int, pending_rows: int) -> None:
    """Barrier ``batch_id`` committed leaving ``pending_rows`` rows of channel state: tell the
    source of every token (a hint, or none when nothing is pending)."""
    hint = PendingHint(batch_id, pending_rows) if pending_rows else None
    for token in tokens:
        publish(token, hint)


def read(token: str) -> PendingHint | None:
    """The current hint of ``token``, or ``None`` (none, or unreadable: a hint is only a hint)."""
    try:
        data = json.loads(_hint_path(token).read_text())
        return PendingHint(int(data["batchId"]), int(data["pendingRows"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring unreadable idle-barrier hint %s: %r", token, exc)
        return None


def tokens_in(source_offsets: Iterable[Any]) -> list[str]:
    """The barrier tokens in a batch's source offsets (parsed JSON lines of Spark's offset log)."""
    tokens = []
    for offset in source_offsets:
        if isinstance(offset, dict) and isinstance(offset.get(TOKEN_KEY), str):
            tokens.append(offset[TOKEN_KEY])
    return tokens


class IdleBarrierTrigger:
    """The source's side: says when to bump ``idleBarrier`` (driver, long-lived reader)."""

    def __init__(self) -> None:
        self._answered_batch: int | None = None
        self._run_started = False

    def start_of_run(self, resumed: bool) -> bool:
        """Called at every ``latestOffset``: True only on the first call of this object's life
        (one per run: the source's reader lives as long as its run), when the start offset
        comes from an earlier run (``resumed``) and no batch was planned yet. Pending state the
        earlier run left is then written by an idle barrier, whatever hint this host has."""
        first = not self._run_started
        self._run_started = True
        return first and resumed

    def batch_planned(self) -> None:
        """A batch was planned: one planned before any ``latestOffset`` is Spark re-running
        the earlier run's last batch, which reaches the sink, so no barrier is forced."""
        self._run_started = True

    def due(self, token: str) -> bool:
        """True once per hint batch id: state is pending and no idle barrier was asked for it."""
        hint = read(token)
        if hint is None or hint.pending_rows <= 0:
            return False
        if self._answered_batch is not None and hint.batch_id <= self._answered_batch:
            return False
        self._answered_batch = hint.batch_id
        logger.info(
            "idle barrier: %d rows of channel state pending since barrier %d",
            hint.pending_rows,
            hint.batch_id,
        )
        return True
