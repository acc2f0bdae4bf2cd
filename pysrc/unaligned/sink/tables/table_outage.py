"""A catalog or table store that does not answer, during a batch's table commit.

The driver's table commit (:meth:`TableParticipant.commit`) goes through
:func:`commit_through_outages`: an answer that says the catalog or the store is out of reach
(connection refused or reset, a timeout, an HTTP 5xx or "service unavailable" from a REST
catalog) is asked again with a growing pause until ``tableTimeout`` has passed, as the Kafka
sink does with a broker that is down (``kafka.default.api.timeout.ms``). Asking again is safe:
each attempt loads the table and reads whether it holds the batch already, so a commit that
landed although its answer was lost is not made twice. Past the timeout the query fails with
:class:`TableUnavailableError` naming the table, what the sink contacts (catalog type and URI,
or the store's location), the option, the attempts and the last error, and the way out: the
batch's decision stays in the commit log, and a restart once the catalog answers commits it
once. Any other error is raised at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from unaligned.errors import TableUnavailableError
from unaligned.sink.table_target import TableTarget

logger = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_PAUSE_S = 0.2
_NOT_OUTAGES = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)
MAX_PAUSE_S = 5.0


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the catalog or the store could not be reached (not a refusal)."""
    if isinstance(exc, _NOT_OUTAGES):  # a path or a permission: asking again cannot cure it
        return False
    if isinstance(exc, OSError):  # refused, reset, timed out; requests' errors; ours
        return True
    try:
        from pyiceberg.exceptions import ServerError, ServiceUnavailableError
    except ImportError:
        return False
    return isinstance(exc, (ServerError, ServiceUnavailableError))


AFTER_DECISION = (
    "The batch's decision stays in the commit log: restart the query once it answers again, and "
    "the restart commits the batch once (it reads the table first, so a commit that landed is "
    "not made twice)"
)


def commit_through_outages(
    target: TableTarget,
    batch_id: int | None,
    attempt: Callable[[], T],
    *,
    doing: str = "committing the batch",
    then: str = AFTER_DECISION,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``attempt()`` until it returns, asked again after each outage (:func:`is_outage`) until
    ``target.timeout_ms`` has passed; then :class:`TableUnavailableError` saying what the sink
    was ``doing`` and, ``then``, what a restart does."""
    deadline = clock() + target.timeout_ms / 1000
    pause = FIRST_PAUSE_S
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except Exception as exc:
            if not is_outage(exc):
                raise
            left = deadline - clock()
            if left <= 0:
                raise TableUnavailableError(
                    f"{'' if batch_id is None else f'batch {batch_id}: '}"
                    f"{target.reached_through()} of {target.describe()} could "
                    f"not be reached while {doing} (within tableTimeout={target.timeout_ms} ms, "
                    f"{attempts} attempt(s)); last: {type(exc).__name__}: {exc}. {then}; a "
                    "longer tableTimeout rides out longer outages"
                ) from exc
            logger.warning(
                "batch %s: %s of %s cannot be reached (%s: %s); asking again in %.1f s",
                batch_id,
                target.reached_through(),
                target.describe(),
                type(exc).__name__,
                exc,
                min(pause, left),
            )
            sleep(min(pause, left))
            pause = min(pause * 2, MAX_PAUSE_S)
