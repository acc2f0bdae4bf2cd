"""The one part of ``unaligned inspect`` that asks the broker: the query's transactions.

The sink's Kafka options (``kafka.bootstrap.servers``, security settings,
``transactionalIdPrefix``) are options of the running query and are not stored in its
checkpoint, so the caller names the cluster and how to log in (``--bootstrap-servers``,
``--command-config``: :mod:`unaligned.kafka.clients.command_config`) and, when the query set
one, the prefix (``--transactional-id-prefix``).

- :func:`open_transactions`: the open transactions under the prefix, each marked as this
  query's (its stem, :mod:`unaligned.sink.topics.kafka_id_pool`) or another query's. An open
  transaction of this query that an in-doubt commit record names is committed when the query
  restarts; any other of its own is fenced by the sink's clean-up; another query's is left alone.
- :func:`with_outcomes`: what a restart does with each in-doubt Kafka batch, from its
  transactions' state (:mod:`unaligned.sink.topics.kafka_abandon`): commits it, holding
  read_committed readers back until then, or cannot, because something ended them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kafka.errors as kafka_errors

from unaligned.errors import KafkaUnavailableError, UnalignedError
from unaligned.inspection.formatting import duration, timestamp
from unaligned.inspection.model import InDoubtBatch, OpenTransaction
from unaligned.kafka.clients.connections import describe_servers
from unaligned.kafka.transactions.transaction_states import (
    describe_transactions,
    list_transactional_ids,
)
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.topics.kafka_abandon import Item, ItemState, item_states
from unaligned.sink.topics.kafka_id_pool import id_pattern
from unaligned.sink.topics.kafka_participant import PARTICIPANT


def open_transactions(
    client_kwargs: Mapping[str, Any], prefix: str, stem: str, in_doubt: Sequence[InDoubtBatch]
) -> tuple[OpenTransaction, ...]:
    """The open transactions under ``prefix`` on the cluster, described, each with the in-doubt
    batch whose record names it. Raises :class:`~unaligned.errors.KafkaUnavailableError` when
    the cluster cannot be reached."""
    try:
        ids = list_transactional_ids(client_kwargs, prefix)
        descriptions = describe_transactions(client_kwargs, ids)
    except (kafka_errors.KafkaError, UnalignedError) as exc:
        raise KafkaUnavailableError(
            f"could not list the transactions of prefix {prefix!r} at "
            f"{describe_servers(client_kwargs)}: {exc!r}"
        ) from exc
    named_by = {tid: batch.batch_id for batch in in_doubt for tid in batch.transactional_ids}
    ours = id_pattern(stem)
    result = []
    for tid in ids:
        d = descriptions.get(tid)
        result.append(
            OpenTransaction(
                transactional_id=tid,
                state=None if d is None else d.state.value,
                producer_id=None if d is None else d.producer_id,
                producer_epoch=None if d is None else d.producer_epoch,
                start_ms=None if d is None else d.transaction_start_time_ms,
                timeout_ms=None if d is None else d.transaction_timeout_ms,
                named_by_batch=named_by.get(tid),
                this_query=ours.fullmatch(tid) is not None or tid in named_by,
            )
        )
    return tuple(result)


def with_outcomes(
    client_kwargs: Mapping[str, Any], log: CommitLog, in_doubt: Sequence[InDoubtBatch]
) -> tuple[InDoubtBatch, ...]:
    """``in_doubt`` with what a restart does with each Kafka batch (module docstring)."""
    result = []
    for batch in in_doubt:
        record = log.read(batch.batch_id)
        if batch.participant != PARTICIPANT or record is None:
            result.append(batch)
            continue
        try:
            items = item_states(client_kwargs, record)
        except (kafka_errors.KafkaError, UnalignedError) as exc:
            raise KafkaUnavailableError(
                f"could not describe batch {batch.batch_id}'s transactions at "
                f"{describe_servers(client_kwargs)}: {exc!r}"
            ) from exc
        held = [i for i in items if i.state is ItemState.HELD]
        result.append(
            dataclasses.replace(batch, outcome=_outcome(batch, items), blocks_readers=bool(held))
        )
    return tuple(result)


def _outcome(batch: InDoubtBatch, items: Sequence[Item]) -> str:
    ended = [i for i in items if i.state in (ItemState.ABORTED, ItemState.UNKNOWN)]
    if ended:
        return (
            f"a restart cannot commit it: {len(ended)} of its transactions were ended ("
            + "; ".join(i.describe() for i in ended[:3])
            + f"). A restart stops with TransactionCommitError until an operator runs "
            f"'unaligned abandon <checkpoint> --batch {batch.batch_id} --replay' (or --skip)"
        )
    held = [i for i in items if i.state is ItemState.HELD]
    if not held:
        return "every transaction is committed: a restart marks it done"
    return (
        f"a restart commits it. Until then {len(held)} held transaction(s) keep every "
        f"read_committed reader of their partitions at the last stable offset, "
        f"{_held_for(batch)}; 'unaligned abandon --batch {batch.batch_id}' ends them without "
        "the restart"
    )


def _held_for(batch: InDoubtBatch) -> str:
    held_ms = int(time.time() * 1000) - batch.decided_at_ms
    text = f"held for {duration(held_ms)} since the decision at {timestamp(batch.decided_at_ms)}"
    if not batch.two_phase_commit:
        text += " (without two-phase commit the broker aborts them when their timeout passes)"
    return text
