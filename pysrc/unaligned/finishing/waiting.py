"""What a user calls to end a query cleanly: :func:`await_finished` and :func:`stop`.

Both watch the checkpoint from the process that started the query (``query`` is its
``StreamingQuery``); ``unaligned stop CHECKPOINT`` (:mod:`unaligned.cli`) runs
:func:`wait_for_stop` from any process or host.

- :func:`await_finished`: bounded input (or a drain) ends with the final checkpoint; Spark
  ends a query by itself only under ``Trigger.AvailableNow``, so this stops it once the final
  checkpoint has committed, under any trigger. It also stops the query when a stop without
  drain (``unaligned stop`` from elsewhere) was honoured.
- :func:`stop`: record a stop request (:mod:`.stop_request`), wait until a barrier honoured it
  and the query is at rest (drain: its final checkpoint committed), then ``query.stop()``. A
  query that ends first raises its exception and leaves the request recorded for its next run.
- :func:`wait_for_stop` is told whether the query still runs: by ``query.isActive``, or, from
  another process, by the source's heartbeat (:func:`stop_from_elsewhere`, ``unaligned stop``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from unaligned.barriers.idle import tokens_in
from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import QUERY_METADATA_FILE, Checkpoint
from unaligned.errors import NotACheckpointError, QueryNotRunningError, StopTimeoutError
from unaligned.finishing.final_checkpoint import at_rest, has_finished
from unaligned.finishing.heartbeat import INTERVAL_S, STALE_S, read_heartbeat
from unaligned.finishing.stop_request import (
    StopRequest,
    link,
    read_request,
    rearm,
    request_stop,
    withdraw,
)

_POLL_S = 0.2


def await_finished(query: Any, checkpoint_location: str, timeout_s: float | None = None) -> bool:
    """Wait until the query ends cleanly, then stop it.

    Ends cleanly: its final checkpoint committed (bounded input, or a drain), or a stop
    without drain requested from elsewhere (``unaligned stop CHECKPOINT``) was honoured at a
    barrier that has committed. ``query`` is the ``StreamingQuery``; ``checkpoint_location``
    its ``checkpointLocation``. Returns ``True`` once the query has ended so (and is stopped),
    ``False`` if ``timeout_s`` passed first (the query keeps running). A query that fails
    raises its exception, as ``awaitTermination`` does. A stop request an earlier run already
    honoured is ignored.
    """
    checkpoint = Checkpoint.resolve(checkpoint_location)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    before = read_request(checkpoint)
    earlier = before if before is not None and before.honoured_by is not None else None
    while True:
        finished = has_finished(checkpoint) and _planned_once(query)
        if finished or _stop_honoured(checkpoint, earlier):
            query.stop()
            return True
        if not query.isActive:
            query.awaitTermination()  # raises the query's exception, if it failed
            return has_finished(checkpoint)
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)


_IDLE_STATUS = frozenset({"Waiting for data to arrive", "Waiting for next trigger"})


def _planned_once(query: Any) -> bool:
    """Whether the query asked its sources for new offsets at least once in this run: only then
    does a finished marker from an earlier run say this run is finished too (a run that
    resumes after a completed drain reads on, and its first batch makes the marker stale)."""
    return query.lastProgress is not None or query.status.get("message") in _IDLE_STATUS


def _stop_honoured(checkpoint: Checkpoint, earlier: StopRequest | None) -> bool:
    request = read_request(checkpoint)
    return (
        request is not None
        and not request.drain
        and request.honoured_by is not None
        and not (earlier is not None and earlier.same_request(request))
        and at_rest(checkpoint)
    )


def stop(
    query: Any, checkpoint_location: str, drain: bool = True, timeout_s: float | None = None
) -> None:
    """Stop the query cleanly at its next barrier, then ``query.stop()``.

    ``drain=True``: the end of every partition is frozen at the latest offsets of now; the
    query reads up to there and ends with its final checkpoint (nothing pending, nothing open).
    Records produced later are read by a run that resumes from this checkpoint without an end.
    ``drain=False``: no batch after the one running now (or the last one); channel state stays
    in the checkpoint, no transaction stays open, and a restart resumes exactly there.

    A query that is not active at the call: its exception is raised if it failed, else
    :class:`~unaligned.errors.QueryNotRunningError`; nothing is requested. A query that ends
    before the stop completed: its exception is raised (as ``awaitTermination`` does), else
    :class:`~unaligned.errors.QueryNotRunningError`; the request stays recorded, so that the
    next run from this checkpoint honours it. Raises
    :class:`~unaligned.errors.StopTimeoutError` after ``timeout_s`` (the query keeps running
    and the request stays recorded), and :class:`~unaligned.errors.NotACheckpointError` for a
    path that is not this query's.
    """
    checkpoint = Checkpoint.resolve(checkpoint_location)
    barrier_token(checkpoint)
    if not query.isActive:
        query.awaitTermination()  # raises the query's exception, if it failed
        raise QueryNotRunningError(
            f"unaligned.stop(drain={drain}): the query is not active (it was stopped before "
            "the call); nothing was requested"
        )
    request = request_stop(checkpoint, drain)
    try:
        wait_for_stop(checkpoint, request, timeout_s, lambda: bool(query.isActive))
    except QueryNotRunningError:
        query.awaitTermination()  # raises the query's exception, if it failed
        raise
    query.stop()
    withdraw(checkpoint, request)


def wait_for_stop(
    checkpoint: Checkpoint,
    request: StopRequest,
    timeout_s: float | None,
    is_active: Callable[[], bool],
) -> None:
    """Wait until a barrier honoured ``request`` and the query is at rest: every planned
    batch committed (without drain), or the final checkpoint committed (drain).

    ``is_active`` says whether the query still runs (``StreamingQuery.isActive``, or the
    source's heartbeat for a stopper in another process, :func:`stop_from_elsewhere`).
    When it says no before the stop completed, the request is recorded again as not honoured
    (:func:`~.stop_request.rearm`) and :class:`~unaligned.errors.QueryNotRunningError` says so.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        token = barrier_token(checkpoint)
        honoured, completed = _progress(checkpoint, request)
        if not honoured and token is not None:
            link(token, checkpoint)  # the query's source on this host sees it now
        if completed:
            return
        if not is_active():
            if _progress(checkpoint, request)[1]:
                return  # completed, and stopped by its own await_finished
            rearm(checkpoint, request)
            raise QueryNotRunningError(_ended_message(checkpoint, request, honoured))
        if deadline is not None and time.monotonic() > deadline:
            raise StopTimeoutError(_timeout_message(checkpoint, request, honoured))
        time.sleep(_POLL_S)


def _progress(checkpoint: Checkpoint, request: StopRequest) -> tuple[bool, bool]:
    """(honoured by a barrier, completed) of ``request``."""
    current = read_request(checkpoint)
    honoured = (
        current is not None and current.same_request(request) and current.honoured_by is not None
    )
    completed = honoured and (has_finished(checkpoint) if request.drain else at_rest(checkpoint))
    return honoured, completed


class _HeartbeatWatch:
    """``is_active`` for a stopper outside the query's process: the source's heartbeat
    (:mod:`.heartbeat`) was rewritten within the last :data:`~.heartbeat.STALE_S` of this
    process's clock (no clock of another host is compared). A heartbeat left by a run that
    ended just before counts only once it changes; the first :data:`~.heartbeat.STALE_S` are
    a grace period (the source starts beating once the stopper linked its token)."""

    def __init__(self, checkpoint: Checkpoint, say: Callable[[str], None]) -> None:
        self._checkpoint = checkpoint
        self._say = say
        beat = read_heartbeat(checkpoint)
        self._last_value = None if beat is None else beat.at_ms
        self._last_change = time.monotonic()
        self.seen = False
        """Whether the heartbeat changed during the stop: the query ran."""

    def active(self) -> bool:
        beat = read_heartbeat(self._checkpoint)
        now = time.monotonic()
        if beat is not None and beat.at_ms != self._last_value:
            self._last_value, self._last_change = beat.at_ms, now
            if not self.seen:
                self._say("the query is running; waiting for its next barrier")
            self.seen = True
        return now - self._last_change < STALE_S


def stop_from_elsewhere(
    checkpoint: Checkpoint, drain: bool, timeout_s: float | None, say: Callable[[str], None]
) -> None:
    """``unaligned stop``: record a request and wait until it completed, from any process.

    Raises :class:`~unaligned.errors.QueryNotRunningError` within about
    :data:`~.heartbeat.STALE_S` when the query's source keeps no heartbeat (the request is
    withdrawn: nothing was requested), or when the query ended before the stop completed (the
    request stays recorded for its next run); :class:`~unaligned.errors.StopTimeoutError` and
    :class:`~unaligned.errors.NotACheckpointError` as :func:`stop` does.
    """
    barrier_token(checkpoint)
    request = request_stop(checkpoint, drain)
    say(f"stop requested (drain={drain})")
    watch = _HeartbeatWatch(checkpoint, say)
    try:
        wait_for_stop(checkpoint, request, timeout_s, watch.active)
    except QueryNotRunningError:
        if watch.seen:
            raise
        withdraw(checkpoint, request)
        heartbeat = read_heartbeat(checkpoint)
        last = (
            "was never written"
            if heartbeat is None
            else f"was last written {heartbeat.age_s(time.time()):.0f} s ago"
        )
        path = checkpoint.source_heartbeat.path
        raise QueryNotRunningError(
            f"the query is not running: its source's heartbeat {path} {last} (a running "
            f"query refreshes it every {INTERVAL_S:.0f} s); the request was withdrawn"
        ) from None


def _ended_message(checkpoint: Checkpoint, request: StopRequest, honoured: bool) -> str:
    path = checkpoint.stop_request.path
    stage = "after a barrier honoured it" if honoured else "before any barrier honoured it"
    return (
        f"stop (drain={request.drain}) did not complete: the query ended {stage}. The request "
        f"stays recorded at {path}: the next run from this checkpoint honours it at its first "
        "barrier; delete that file to withdraw it."
    )


def _timeout_message(checkpoint: Checkpoint, request: StopRequest, honoured: bool) -> str:
    path = checkpoint.stop_request.path
    last = checkpoint.last_logged_batch()
    if not honoured:
        waited = (
            "the query is running but no barrier of it honoured the stop request yet (a batch "
            "still running; a query on another host sees the request after its next batch)"
        )
    elif request.drain:
        committed = last is not None and checkpoint.spark_committed(last)
        waited = (
            "the drain was honoured; the final checkpoint has not committed yet (last planned "
            f"batch {last}, committed: {committed})"
        )
    else:
        waited = f"the stop was honoured; batch {last} has not committed yet"
    return (
        f"stop (drain={request.drain}) did not complete in time: {waited}. The request stays "
        f"recorded at {path}: the query acts on it at its next barrier; delete that file to "
        "withdraw it."
    )


def barrier_token(checkpoint: Checkpoint) -> str | None:
    """The barrier token of the query's ``format("unaligned")`` source, from the last batch of
    Spark's offset log; ``None`` while no batch was planned yet.

    Raises :class:`~unaligned.errors.NotACheckpointError` for a path without Spark's query
    metadata, or whose offsets carry no barrier token (not a ``format("unaligned")`` query).
    """
    if checkpoint.filesystem.get_file_info(checkpoint.metadata.path).type.name == "NotFound":
        raise NotACheckpointError(
            f"{checkpoint.location} is not a streaming query's checkpoint: it has no "
            f"'{QUERY_METADATA_FILE}' file (pass the query's checkpointLocation)"
        )
    last = checkpoint.last_logged_batch()
    if last is None:
        return None
    tokens = tokens_in(s.offset for s in read_offset_log(checkpoint, last).sources)
    if not tokens:
        raise NotACheckpointError(
            f"{checkpoint.location} is not the checkpoint of a query reading "
            'format("unaligned"): the offsets of its batch '
            f"{last} carry no barrierToken"
        )
    return tokens[0]
