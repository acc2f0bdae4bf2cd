"""A Kafka sink task's prepared work as an item of its commit message and the commit record.

A task's commit message carries its :class:`~unaligned.kafka.transactions.transactions.
PreparedTransaction` as a JSON object (:func:`prepared_to_json`), which the driver's commit
record keeps and any later process reads back (:func:`prepared_from_json`) to commit or abort
the transaction by handle. Keys: ``transactionalId``, ``producerId``, ``epoch``,
``recordCount``, ``partition`` (the task), and ``twoPhaseCommit`` (only when true: the
transaction takes part in two-phase commit, KIP-939); records written before it lack the key.

The at-least-once sink's items (:func:`written_to_json`) name the idempotent producer that wrote
a task's records (``producerId``, ``epoch``) and ``recordCount``, ``partition``: nothing is left
to commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from unaligned.kafka.transactions.transactions import PreparedTransaction

if TYPE_CHECKING:  # the planner and the commit runner load no produce-side module
    from unaligned.kafka.produce.producer_modes import WrittenRecords


def prepared_to_json(prepared: PreparedTransaction, partition_id: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "transactionalId": prepared.transactional_id,
        "producerId": prepared.producer_id,
        "epoch": prepared.epoch,
        "recordCount": prepared.record_count,
        "partition": partition_id,
    }
    if prepared.two_phase_commit:  # absent: written before, or without two-phase commit
        item["twoPhaseCommit"] = True
    return item


def prepared_from_json(item: Mapping[str, Any]) -> PreparedTransaction:
    return PreparedTransaction(
        transactional_id=str(item["transactionalId"]),
        producer_id=int(item["producerId"]),
        epoch=int(item["epoch"]),
        record_count=int(item["recordCount"]),
        two_phase_commit=bool(item.get("twoPhaseCommit", False)),
    )


def written_to_json(written: WrittenRecords, partition_id: int) -> dict[str, Any]:
    return {
        "producerId": written.producer_id,
        "epoch": written.epoch,
        "recordCount": written.record_count,
        "partition": partition_id,
    }
