"""What a user calls to end a query cleanly: :func:`await_finished` and :func:`stop`.

Both watch the checkpoint from the process that started the query (``query`` is its
``StreamingQuery``); ``unaligned stop CHECKPOINT`` (:mod:`unaligned.cli`) runs
:func:`wait_for_stop` from any process or host.

- :func:`await_finished`: bounded input (or a drain) ends with the final checkpoint; Spark
  ends a query by itself only under ``Trigger.AvailableNow``, so this stops it once the final
  checkpoint has committed, under any trigger. It also stops the query when a stop without
  drain (``unaligned stop`` from elsewhere) was honoured.
- :func:`stop`: record a stop request (:mod:`.stop_request`), wait until a barrier honoured it
  and the query is at rest (drain: its final checkpoint committed), then ``query.stop()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from unaligned._fs import resolve_location
from unaligned.barriers.idle import tokens_in
from unaligned.barriers.offset_log import QUERY_METADATA_FILE, read_offset_log
from unaligned.errors import NotACheckpointError, StopTimeoutError
from unaligned.finishing.final_checkpoint import (
    at_rest,
    has_finished,
    last_logged_batch,
    spark_committed,
)
from unaligned.finishing.stop_request import (
    STOP_FILE,
    StopRequest,
    link,
    read_request,
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
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    before = read_request(checkpoint_location)
    earlier = before if before is not None and before.honoured_by is not None else None
    while True:
        finished = has_finished(checkpoint_location) and _planned_once(query)
        if finished or _stop_honoured(checkpoint_location, earlier):
            query.stop()
            return True
        if not query.isActive:
            query.awaitTermination()  # raises the query's exception, if it failed
            return has_finished(checkpoint_location)
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)


_IDLE_STATUS = frozenset({"Waiting for data to arrive", "Waiting for next trigger"})


def _planned_once(query: Any) -> bool:
    """Whether the query asked its sources for new offsets at least once in this run: only then
    does a finished marker from an earlier run say this run is finished too (a run that
    resumes after a completed drain reads on, and its first batch makes the marker stale)."""
    return query.lastProgress is not None or query.status.get("message") in _IDLE_STATUS


def _stop_honoured(checkpoint_location: str, earlier: StopRequest | None) -> bool:
    request = read_request(checkpoint_location)
    return (
        request is not None
        and not request.drain
        and request.honoured_by is not None
        and not (earlier is not None and earlier.same_request(request))
        and at_rest(checkpoint_location)
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

    Raises :class:`~unaligned.errors.StopTimeoutError` after ``timeout_s`` (the query keeps
    running and the request stays recorded), and
    :class:`~unaligned.errors.NotACheckpointError` for a path that is not this query's.
    """
    barrier_token(checkpoint_location)
    request = request_stop(checkpoint_location, drain)
    wait_for_stop(checkpoint_location, request, timeout_s, lambda: bool(query.isActive))
    query.stop()
    withdraw(checkpoint_location, request)


def wait_for_stop(
    checkpoint_location: str,
    request: StopRequest,
    timeout_s: float | None,
    is_active: Callable[[], bool] | None = None,
) -> None:
    """Wait until a barrier honoured ``request`` and the query is at rest: every planned
    batch committed (without drain), or the final checkpoint committed (drain). Returns early
    when ``is_active`` says the query already ended."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        token = barrier_token(checkpoint_location)
        current = read_request(checkpoint_location)
        honoured = (
            current is not None
            and current.same_request(request)
            and current.honoured_by is not None
        )
        if not honoured and token is not None:
            link(token, checkpoint_location)  # the query's source on this host sees it now
        if honoured and (
            has_finished(checkpoint_location) if request.drain else at_rest(checkpoint_location)
        ):
            return
        if is_active is not None and not is_active():
            return
        if deadline is not None and time.monotonic() > deadline:
            raise StopTimeoutError(_timeout_message(checkpoint_location, request, honoured))
        time.sleep(_POLL_S)


def _timeout_message(checkpoint_location: str, request: StopRequest, honoured: bool) -> str:
    path = resolve_location(checkpoint_location).child(*STOP_FILE).path
    last = last_logged_batch(checkpoint_location)
    if not honoured:
        waited = (
            "no barrier of the query honoured the stop request (is the query running? a query "
            "on another host sees it at its next barrier)"
        )
    elif request.drain:
        committed = last is not None and spark_committed(checkpoint_location, last)
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


def barrier_token(checkpoint_location: str) -> str | None:
    """The barrier token of the query's ``format("unaligned")`` source, from the last batch of
    Spark's offset log; ``None`` while no batch was planned yet.

    Raises :class:`~unaligned.errors.NotACheckpointError` for a path without Spark's query
    metadata, or whose offsets carry no barrier token (not a ``format("unaligned")`` query).
    """
    root = resolve_location(checkpoint_location)
    metadata = root.child(QUERY_METADATA_FILE)
    if metadata.filesystem.get_file_info(metadata.path).type.name == "NotFound":
        raise NotACheckpointError(
            f"{checkpoint_location} is not a streaming query's checkpoint: it has no "
            f"'{QUERY_METADATA_FILE}' file (pass the query's checkpointLocation)"
        )
    last = last_logged_batch(checkpoint_location)
    if last is None:
        return None
    tokens = tokens_in(s.offset for s in read_offset_log(checkpoint_location, last).sources)
    if not tokens:
        raise NotACheckpointError(
            f"{checkpoint_location} is not the checkpoint of a query reading "
            'format("unaligned"): the offsets of its batch '
            f"{last} carry no barrierToken"
        )
    return tokens[0]
