"""The Kafka sink's pool of transactional ids, ``<stem>-<task>-<slot>``: whose ids they are, and
how an attempt claims one that no other live attempt of the task can claim.

The *stem* proves an id is this query's (:func:`id_stem`): ``unaligned-<query id>`` by default,
``<transactionalIdPrefix>-q<owner>`` with a user prefix, ``<owner>`` twelve hex digits of the
query id's SHA-256. Ids are exactly ``<stem>-<digits>-<digits>``, so an id names one stem (read
from its end, :func:`stem_of`): two queries sharing a prefix, or prefixes ``X`` and ``X-7``, never
see each other's ids as their own, and a query only describes, fences, aborts or commits ids of
its own stem (:func:`id_pattern`).

A slot is taken by ``InitProducerId``, which fences whoever held the id before: two live
attempts of one task must therefore never try the same slot. Each attempt has its own *lane*,
a sequence of slots no other lane contains, and takes the first slot of its lane with no open
transaction (an open one may be named by a commit record not yet rolled forward, or be a dead
attempt's; it is skipped, never fenced):

- the lane is :func:`lane` of the task's ``attemptNumber`` and the batch's parity: a retried or
  speculative attempt has another ``attemptNumber``; a zombie of the previous batch (it checked
  for a decision just before that batch was decided) has the other parity;
- slot ``k`` of lane ``u`` is :func:`slot` ``(u, k)``, the Cantor pairing of the two: one
  lane's slots never meet another's.

PySpark tells a task nothing of its stage attempt, so a retried stage (attempt numbers restart
at 0) shares lanes with its zombies: the one that loses is fenced, fails as a task failure, or,
prepared, is refused at the decision as fenced
(:func:`unaligned.kafka.transactions.transaction_states.commit_blockers`). A query without failures
uses slot 0 in even batches and 1 in odd ones. ARCHITECTURE.md ("The two-phase commit", step 1) has
the protocol around it.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from unaligned.kafka.transactions import transaction_states

logger = logging.getLogger(__name__)


def _pair(a: int, b: int) -> int:
    """Cantor's pairing: a one-to-one map of two natural numbers to one."""
    return (a + b) * (a + b + 1) // 2 + b


def lane(batch_id: int, attempt_number: int) -> int:
    """The lane of a task attempt (module docstring): distinct for attempts of one stage
    attempt, and for the attempts of two consecutive batches."""
    return 2 * attempt_number + batch_id % 2


def slot(lane_index: int, k: int) -> int:
    """The ``k``-th slot of lane ``lane_index`` (0 and 1 first, for the lanes 0 and 1)."""
    return _pair(lane_index, k)


DEFAULT_PREFIX = "unaligned"
OWNER_DIGITS = 12


def default_transactional_id_prefix(query_id: str) -> str:
    """The stem of a query that set no ``transactionalIdPrefix``: it holds the whole query id."""
    return f"{DEFAULT_PREFIX}-{query_id}"


def owner_tag(query_id: str) -> str:
    """``q`` and twelve hex digits of the query id's SHA-256: the same for every run of a
    checkpoint (Spark keeps the query id in it), another for another query."""
    return "q" + hashlib.sha256(query_id.encode("utf-8")).hexdigest()[:OWNER_DIGITS]


def id_stem(prefix: str | None, query_id: str) -> str:
    """What every id of the query's pool starts with (module docstring)."""
    if prefix is None:
        return default_transactional_id_prefix(query_id)
    return f"{prefix}-{owner_tag(query_id)}"


def id_pattern(stem: str) -> re.Pattern[str]:
    """Exactly the ids of the pool of ``stem``: ``<stem>-<task>-<slot>``."""
    return re.compile(re.escape(stem) + r"-\d+-\d+")


def stem_of(transactional_id: str) -> str | None:
    """The stem of a pool id (``None`` for an id of no pool): everything before its last two
    ``-<digits>`` parts. Ids of this project before stems had owners (``<prefix>-<task>-<slot>``,
    or ``<prefix>-<batch>-<task>-<attempt>``) read as stems of no owner."""
    parts = transactional_id.rsplit("-", 2)
    if len(parts) == 3 and parts[0] and parts[1].isdigit() and parts[2].isdigit():
        return parts[0]
    return None


def free_id(
    kwargs: Mapping[str, Any], transactional_id: Callable[[int], str], lane_index: int
) -> str:
    """The first id of lane ``lane_index`` with no open transaction, asked one at a time (the
    coordinator is asked per id anyway, and the first is free but after a failure)."""
    k = 0
    while True:
        tid = transactional_id(slot(lane_index, k))
        if not transaction_states.is_open(
            transaction_states.describe_transactions(kwargs, [tid])[tid]
        ):
            return tid
        logger.info("transactional id %r has a transaction open; trying the next", tid)
        k += 1
