"""Which Kafka errors are worth asking again, and asking again within one bound a user sets.

Kafka's Java clients never surface a leader or coordinator that moved, a broker that restarts
or a connection that dropped: they refresh their metadata and ask again, with a backoff that
doubles from ``retry.backoff.ms`` up to ``retry.backoff.max.ms`` (1 s), until the call's bound
runs out (``default.api.timeout.ms``, 60 s, for the consumer's and the admin client's calls;
``delivery.timeout.ms`` for a produced record; ``max.block.ms`` for the producer's metadata and
``initTransactions``). This module is that rule for the package:

- :func:`is_retriable`: kafka-python's ``RetriableError`` family (leader moved, coordinator
  moved or loading, lost connection, request timed out, not enough replicas...) and
  ``UnknownBrokerIdError``, which kafka-python raises when its metadata names a broker it no
  longer lists (a broker that left during a restart): stale metadata, as the Java clients treat
  a node they cannot find;
- :class:`Backoff`: the doubling wait, with 20% jitter as the Java clients';
- :func:`call_until`: a blocking call asked again on retriable errors until a deadline, the
  caller told of each failure first (to drop a kept client whose metadata or connections are
  stale); when the deadline passes the last error is raised as
  :class:`~unaligned.errors.KafkaUnavailableError` naming what was being done and the bound.

Which option bounds what is in docs/concepts/guarantees.md ("Kafka clusters that lose brokers").
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import kafka.errors as kafka_errors

from unaligned.errors import KafkaUnavailableError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Java's ``retry.backoff.max.ms``.
MAX_BACKOFF_S = 1.0
#: The first wait when the caller's ``retry.backoff.ms`` is smaller.
MIN_BACKOFF_S = 0.01

#: Errors that mean "ask again, maybe elsewhere": the metadata is stale or the broker busy.
RETRIABLE: tuple[type[BaseException], ...] = (
    kafka_errors.RetriableError,
    kafka_errors.UnknownBrokerIdError,
)
#: Retriable errors after which the metadata (leaders, coordinators) must be asked again.
STALE_METADATA: tuple[type[BaseException], ...] = (
    kafka_errors.InvalidMetadataError,  # not leader, unknown topic, connection lost, storage...
    kafka_errors.UnknownBrokerIdError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.NotCoordinatorError,
    kafka_errors.CoordinatorNotAvailableError,
)


def is_retriable(error: BaseException | type[BaseException]) -> bool:
    """Whether asking again (after refreshing metadata where :func:`needs_metadata`) may help."""
    kind = error if isinstance(error, type) else type(error)
    return issubclass(kind, RETRIABLE)


def needs_metadata(error: BaseException | type[BaseException]) -> bool:
    """Whether the error says the client's view of leaders or coordinators is stale."""
    kind = error if isinstance(error, type) else type(error)
    return issubclass(kind, STALE_METADATA)


@dataclass
class Backoff:
    """Waits that double from ``first_s`` up to :data:`MAX_BACKOFF_S`, each within 20% of its
    nominal value (Java's ``retry.backoff.ms`` / ``retry.backoff.max.ms``, KIP-580)."""

    first_s: float = 0.1
    max_s: float = MAX_BACKOFF_S
    _next_s: float = 0.0

    def next(self) -> float:
        """The next wait in seconds (the first call gives about ``first_s``)."""
        nominal = self._next_s or max(self.first_s, MIN_BACKOFF_S)
        self._next_s = min(nominal * 2, self.max_s)
        return nominal * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self._next_s = 0.0


def remaining_ms(deadline: float, cap_ms: int) -> int:
    """Milliseconds left until ``deadline`` (``time.monotonic()``), at most ``cap_ms`` (the
    request timeout) and at least 1."""
    return max(1, min(cap_ms, int((deadline - time.monotonic()) * 1000)))


def call_until(
    attempt: Callable[[float], T],
    *,
    doing: str,
    servers: str,
    timeout_ms: int,
    option: str = "kafka.default.api.timeout.ms",
    backoff: Backoff | None = None,
    on_retriable: Callable[[BaseException], None] | None = None,
) -> T:
    """``attempt(deadline)`` until it returns, asked again after each retriable error
    (:func:`is_retriable`) until ``timeout_ms`` has passed; ``on_retriable(error)`` runs before
    each wait (drop a kept client). A non-retriable error is raised as it is; running out of time
    raises :class:`KafkaUnavailableError` naming ``doing``, the servers, ``option`` and the last
    error."""
    deadline = time.monotonic() + timeout_ms / 1000
    waits = backoff or Backoff()
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt(deadline)
        except KafkaUnavailableError:
            raise
        except Exception as exc:
            if not is_retriable(exc):
                raise
            if on_retriable is not None:
                on_retriable(exc)
            wait = waits.next()
            if time.monotonic() + wait >= deadline:
                raise KafkaUnavailableError(
                    f"Kafka at {servers} could not be reached while {doing} (within "
                    f"{option}={timeout_ms}, {attempts} attempts): {exc!r}"
                ) from exc
            logger.info("%s on %s: %r; asking again in %.2f s", doing, servers, exc, wait)
            time.sleep(wait)
