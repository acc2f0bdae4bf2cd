"""A Kafka sink task attempt's writes (step 1 of the protocol), apart from the driver side.

:class:`SessionTaskWriter` is the task writer of both Kafka participants: its chunks are encoded
as whole record batches (:mod:`unaligned.sink.topics.kafka_batches`) and sent by a
:class:`~unaligned.kafka.produce.produce_session.ProduceSession` on the worker process's kept
connections, at most ``maxUnacknowledgedBytes`` unacknowledged between chunks; its
:meth:`~SessionTaskWriter.prepare` returns the commit-record item
(:mod:`unaligned.sink.topics.kafka_items`) of what the session prepared. The session's mode makes
the difference (:mod:`unaligned.kafka.produce.producer_modes`):

- :class:`KafkaTaskWriter`: a transaction on the attempt's transactional id, which the driver
  commits (:meth:`unaligned.sink.topics.kafka_participant.KafkaParticipant.open_task`);
- :func:`at_least_once_task_writer`: an idempotent producer's records, visible once
  acknowledged (:mod:`unaligned.sink.topics.kafka_at_least_once`).

Only task workers import this module: Spark's planner and the commit runner, which build the
participant before every batch, load neither the encoder, ``pyarrow.compute`` nor the produce
session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Generic, TypeVar

import pyarrow as pa

from unaligned.errors import TransactionWriteError
from unaligned.kafka.clients.admin_clients import warm_admin_client
from unaligned.kafka.produce import produce_session
from unaligned.kafka.produce.produce_session import ProduceSession
from unaligned.kafka.produce.producer_modes import Idempotent, InTransaction, WrittenRecords
from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.topics.kafka_batches import BatchChunkWriter
from unaligned.sink.topics.kafka_columns import KafkaColumns
from unaligned.sink.topics.kafka_items import prepared_to_json, written_to_json

W = TypeVar("W")


def warm_up(client_kwargs: Mapping[str, Any]) -> None:
    """Ready this worker process for a task writer on ``client_kwargs`` (step 1b): this module's
    imports (the encoder, ``pyarrow.compute``, the produce session), the produce session's kept
    client, and the kept client the topic's limits and
    :func:`unaligned.sink.topics.kafka_id_pool.free_id` ask through. Nothing is asked of a
    coordinator and no id is claimed."""
    produce_session.warm_up(client_kwargs)
    warm_admin_client(client_kwargs)


class SessionTaskWriter(Generic[W]):
    """One task attempt's writes through ``session`` (module docstring): :meth:`begin` opens
    it (``InitProducerId``), :meth:`prepare` flushes it and returns ``item`` of what it
    prepared."""

    def __init__(
        self,
        target: KafkaTarget,
        columns: KafkaColumns,
        session: ProduceSession[W],
        item: Callable[[W], dict[str, Any]],
    ) -> None:
        self._target = target
        self._columns = columns
        self._session = session
        self._item = item
        self._writer: ProduceSession[W] | None = None
        self._batches: BatchChunkWriter | None = None

    def begin(self) -> None:
        self._writer = self._session
        self._session.begin()
        self._batches = BatchChunkWriter(self._target, self._columns, self._session)

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        self._open_writer()
        assert self._batches is not None
        self._batches.write_chunk(chunk)

    def _open_writer(self) -> ProduceSession[W]:
        if self._writer is None:
            raise TransactionWriteError(f"{self._session.describe()} was not begun before writing")
        return self._writer

    def between_chunks(self) -> None:
        """Keep at most ``maxUnacknowledgedBytes`` sent but unacknowledged between chunks."""
        self._open_writer().wait_unacknowledged(self._target.max_unacknowledged_bytes)

    def prepare(self) -> dict[str, Any]:
        try:
            prepared = self._open_writer().prepare()
        finally:
            if self._batches is not None:  # the next task of the process asks the limit again
                self._batches.forget_refused_limits()
        return self._item(prepared)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class KafkaTaskWriter(SessionTaskWriter[PreparedTransaction]):
    """Writes one task attempt's rows into one transaction on ``transactional_id``; its item is
    the prepared transaction (:func:`unaligned.sink.topics.kafka_items.prepared_to_json`)."""

    def __init__(
        self,
        target: KafkaTarget,
        columns: KafkaColumns,
        client_kwargs: Mapping[str, Any],
        transactional_id: str,
        partition_id: int,
    ) -> None:
        super().__init__(
            target,
            columns,
            ProduceSession(client_kwargs, InTransaction(transactional_id)),
            partial(prepared_to_json, partition_id=partition_id),
        )


def at_least_once_task_writer(
    target: KafkaTarget, columns: KafkaColumns, client_kwargs: Mapping[str, Any], partition_id: int
) -> SessionTaskWriter[WrittenRecords]:
    """One task attempt's rows written by an idempotent producer of its own; its item names the
    producer and the records (:func:`unaligned.sink.topics.kafka_items.written_to_json`)."""
    return SessionTaskWriter(
        target,
        columns,
        ProduceSession(client_kwargs, Idempotent()),
        partial(written_to_json, partition_id=partition_id),
    )
