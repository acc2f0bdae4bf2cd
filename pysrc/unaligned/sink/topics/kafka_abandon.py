"""An operator ends a decided Kafka batch that its query cannot or will not finish.

A batch decided by the sink (its commit record written) and not finished holds its prepared
transactions open until the query restarts; with two-phase commit (KIP-939) nothing else ends
them, and every read_committed reader of their partitions waits at the last stable offset.
``unaligned abandon <checkpoint> --batch N`` (:mod:`unaligned.cli`) ends them, with the query
stopped, in one of three ways (:class:`Choice`), each safe to run again after a crash:

- ``commit``: commit every held transaction by handle and mark the batch done: what the restart
  would have done (refused if one of them was already ended);
- ``replay``: abort the held transactions and withdraw the commit record: the restart runs the
  batch anew from Spark's offset log. Exactly once while none of them was committed (refused
  otherwise unless duplicates are accepted);
- ``skip``: abort the held transactions and mark the batch done as abandoned: its records are
  given up, the query goes on after it.

What each item is now comes from its coordinator (:func:`item_states`); what was done is kept
in ``<checkpoint>/unaligned/abandoned/<N>.json`` for ``unaligned inspect``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.admin import TransactionDescription, TransactionState

from unaligned.errors import AbandonError
from unaligned.kafka.transactions import transaction_coordinator, transaction_states
from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.topics.kafka_items import prepared_from_json
from unaligned.sink.topics.kafka_participant import PARTICIPANT
from unaligned.sink.topics.kafka_refusals import transaction_ending


class Choice(enum.Enum):
    """How the operator ends the batch (module docstring)."""

    COMMIT = "commit"
    REPLAY = "replay"
    SKIP = "skip"


class ItemState(enum.Enum):
    """A prepared transaction as its coordinator has it now."""

    EMPTY = "empty"  # no record was written: nothing to end
    HELD = "held"  # still open under its producer id and epoch
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"  # the id moved on (another producer, or expired): outcome not known


_COMMITTING = frozenset({TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT})
_ABORTING = frozenset({TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT})


def item_state(prepared: PreparedTransaction, now: TransactionDescription | None) -> ItemState:
    """What ``prepared`` is as its coordinator now describes its id."""
    if prepared.record_count == 0:
        return ItemState.EMPTY
    if now is None or now.producer_id != prepared.producer_id:
        return ItemState.UNKNOWN
    if now.producer_epoch == prepared.epoch:
        if now.state is TransactionState.ONGOING:
            return ItemState.HELD
        if now.state in _COMMITTING:
            return ItemState.COMMITTED
        return ItemState.ABORTED
    if now.producer_epoch == prepared.epoch + 1 and now.state in _ABORTING:
        return ItemState.ABORTED  # the broker's timeout, or a forced termination
    return ItemState.UNKNOWN


@dataclass(frozen=True)
class Item:
    prepared: PreparedTransaction
    state: ItemState
    ending: str  # what the coordinator says of it, in words

    def describe(self) -> str:
        return f"{self.prepared.describe()}: {self.state.value} ({self.ending})"


def item_states(client_kwargs: Mapping[str, Any], record: CommitRecord) -> list[Item]:
    """Every prepared transaction the record names, with its state now."""
    prepared = [prepared_from_json(item) for item in record.prepared]
    now = transaction_states.describe_transactions(
        client_kwargs, [p.transactional_id for p in prepared if p.record_count]
    )
    items = []
    for p in prepared:
        description = now.get(p.transactional_id)
        ending = "nothing written" if p.record_count == 0 else transaction_ending(p, description)
        items.append(Item(p, item_state(p, description), ending))
    return items


def decided_unfinished(log: CommitLog, batch_id: int) -> CommitRecord:
    """Batch ``batch_id``'s commit record; :class:`AbandonError` if there is nothing to end."""
    record = log.read(batch_id)
    if record is None:
        raise AbandonError(
            f"batch {batch_id} has no commit record: it was never decided, so nothing of it is "
            "held; a restart runs it again"
        )
    if log.is_done(batch_id):
        raise AbandonError(f"batch {batch_id} is finished: nothing of it is held")
    if record.participant != PARTICIPANT:
        raise AbandonError(
            f"batch {batch_id} was written by the {record.participant!r} sink, which holds "
            "nothing open that blocks readers: a restart finishes it"
        )
    return record


def abandon(
    log: CommitLog,
    batch_id: int,
    choice: Choice,
    client_kwargs: Mapping[str, Any],
    *,
    accept_duplicates: bool = False,
) -> list[Item]:
    """End batch ``batch_id`` as ``choice`` says (module docstring); returns its items as they
    were found. Raises :class:`AbandonError` when the choice cannot be carried out as promised,
    before anything is changed."""
    record = decided_unfinished(log, batch_id)
    items = item_states(client_kwargs, record)
    held = [i.prepared for i in items if i.state is ItemState.HELD]
    if choice is Choice.COMMIT:
        _refuse_if(items, (ItemState.ABORTED, ItemState.UNKNOWN), batch_id, "committed")
        transaction_coordinator.commit_all_prepared(client_kwargs, held)
        _note(log, batch_id, choice, items)
        log.mark_done(batch_id)
        return items
    if choice is Choice.REPLAY and not accept_duplicates:
        _refuse_if(items, (ItemState.COMMITTED, ItemState.UNKNOWN), batch_id, "replayed")
    _abort(client_kwargs, held)
    _note(log, batch_id, choice, items)
    if choice is Choice.REPLAY:
        log.withdraw(batch_id)
    else:
        log.mark_done(batch_id, abandoned=choice.value)
    return items


def _refuse_if(
    items: Sequence[Item], states: tuple[ItemState, ...], batch_id: int, verb: str
) -> None:
    found = [i for i in items if i.state in states]
    if not found:
        return
    if verb == "committed":
        instead = "'--replay' (if none was committed) or '--skip'"
    else:
        instead = (
            "'--skip' (gives the held ones up), or '--replay --accept-duplicates' (writes the "
            "committed ones' records a second time)"
        )
    raise AbandonError(
        f"batch {batch_id} cannot be {verb} exactly once: "
        + "; ".join(i.describe() for i in found)
        + f". Nothing was changed. Use {instead}"
    )


def _abort(client_kwargs: Mapping[str, Any], held: Sequence[PreparedTransaction]) -> None:
    for prepared in held:
        transaction_coordinator.abort_prepared(client_kwargs, prepared)


def _note(log: CommitLog, batch_id: int, choice: Choice, items: Sequence[Item]) -> None:
    log.note_abandoned(
        batch_id,
        {
            "batchId": batch_id,
            "choice": choice.value,
            "atMs": int(time.time() * 1000),
            "items": [
                {"transactionalId": i.prepared.transactional_id, "stateFound": i.state.value}
                for i in items
            ],
        },
    )
