"""The Kafka participant of the at-least-once sink: a task's records visible as it writes them.

``deliveryGuarantee=at-least-once`` is for clusters without transactions (Azure Event Hubs,
clusters that refuse them). Each task attempt writes its rows with an idempotent producer of its
own (``InitProducerId`` without a transactional id:
:class:`~unaligned.kafka.produce.producer_modes.Idempotent`) through the same produce session and
encoding as the exactly-once sink (:func:`unaligned.sink.topics.kafka_task_writer.
at_least_once_task_writer`, imported by task workers only), ``acks=all``; its item
(:func:`unaligned.sink.topics.kafka_items.written_to_json`) names the producer and how many records
it wrote, all acknowledged before the task reports. The driver's protocol is unchanged: its
decision, the commit record, carries the barrier's channel state, so unaligned barriers spill
and replay as with exactly-once. It has nothing to commit or abort: the records are visible once
acknowledged.

What a failure costs: a task attempt that fails, or a batch not decided before a crash, is
written again when it runs again, so readers may see some records twice; none is lost (a batch
is decided only once every record of its tasks is acknowledged, and one not decided runs
again). A decided batch is never written again (step 1a of
:mod:`unaligned.sink.two_phase_commit`). Its commit records name kind
``kafka-at-least-once``: a checkpoint does not switch between the two guarantees.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.topics.kafka_checks import require_topic
from unaligned.sink.topics.kafka_columns import KafkaColumns

if TYPE_CHECKING:
    from unaligned.kafka.produce.producer_modes import WrittenRecords
    from unaligned.sink.topics.kafka_task_writer import SessionTaskWriter

logger = logging.getLogger(__name__)

PARTICIPANT = "kafka-at-least-once"


class KafkaAtLeastOnceParticipant:
    """Idempotent writes as 2PC participants (module docstring). Picklable: options only."""

    kind = PARTICIPANT

    def __init__(self, target: KafkaTarget, columns: KafkaColumns, client_prefix: str) -> None:
        self._target = target
        self._columns = columns
        self._prefix = client_prefix

    def client_kwargs(self) -> dict[str, Any]:
        """The producer kwargs of the sink in this process; without ``kafka.client.id`` the
        client id is ``producer-<prefix>-<process id>`` (one running task per worker)."""
        kwargs = self._target.client_kwargs()
        kwargs.setdefault("client_id", f"producer-{self._prefix}-{os.getpid()}")
        return kwargs

    def describe(self, item: Mapping[str, Any]) -> str:
        return (
            f"{item['recordCount']} record(s) of idempotent producer id {item['producerId']} "
            f"(epoch {item['epoch']})"
        )

    def item_key(self, item: Mapping[str, Any]) -> str:
        return f"{item['producerId']}:{item['epoch']}"

    def check_at_query_start(self) -> None:
        """The ``topic`` option names a topic that exists."""
        if self._target.topic is not None:
            require_topic(self.client_kwargs(), self._target.topic, self._target.bootstrap_servers)

    def warm_up(self) -> None:
        """Step 1b's warm-up: :func:`unaligned.sink.topics.kafka_task_writer.warm_up`."""
        from unaligned.sink.topics import kafka_task_writer  # task workers only

        kafka_task_writer.warm_up(self.client_kwargs())

    def open_task(
        self, batch_id: int, partition_id: int, attempt_number: int
    ) -> SessionTaskWriter[WrittenRecords]:
        """1. Pre-commit starts: a new idempotent producer (``InitProducerId``)."""
        from unaligned.sink.topics.kafka_task_writer import (
            at_least_once_task_writer,  # task workers
        )

        writer = at_least_once_task_writer(
            self._target, self._columns, self.client_kwargs(), partition_id
        )
        writer.begin()
        return writer

    def consolidate(
        self, items: Sequence[Mapping[str, Any]], batch_id: int
    ) -> list[Mapping[str, Any]]:
        return list(items)

    def check_decidable(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Every item is decidable: its records were acknowledged before its task reported."""

    def commit(
        self, items: Sequence[Mapping[str, Any]], batch_id: int, progress: Callable[[int], None]
    ) -> None:
        """Nothing to commit: the records are visible since they were acknowledged."""
        progress(len(items))

    def finish_batch(self, record: CommitRecord) -> None:
        """Nothing to publish."""

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Nothing can be taken back: the records stay, and are written again by the batch's
        next run (an undecided batch) or were by another attempt of the task (a zombie's own
        abort, step 1d of the two-phase commit)."""
        if items:
            written = sum(int(item["recordCount"]) for item in items)
            logger.warning(
                "batch %d: %d record(s) written by task attempts the batch's decision does not "
                "take stay visible; another attempt, or the batch's next run, writes them again "
                "(at-least-once: duplicates)",
                batch_id,
                written,
            )

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        """No transaction is ever left open."""
        return 0
