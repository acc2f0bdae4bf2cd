"""A Kafka sink task attempt's transaction (step 1 of the protocol), apart from the driver side.

:class:`KafkaTaskWriter` is what :meth:`unaligned.sink.topics.kafka_participant.KafkaParticipant.
open_task` gives a task: its chunks are encoded as whole record batches
(:mod:`unaligned.sink.topics.kafka_batches`) and sent by a
:class:`~unaligned.kafka.produce.produce_session.ProduceSession` on the worker process's kept
connections; :meth:`KafkaTaskWriter.prepare` returns the commit-record item
(:mod:`unaligned.sink.topics.kafka_items`). Only task workers import this module: Spark's planner
and the commit runner, which build the participant before every batch, load neither the encoder,
``pyarrow.compute`` nor the produce session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from unaligned.errors import TransactionWriteError
from unaligned.kafka.produce.produce_session import ProduceSession
from unaligned.sink.options import KafkaTarget
from unaligned.sink.topics.kafka_batches import BatchChunkWriter
from unaligned.sink.topics.kafka_columns import KafkaColumns
from unaligned.sink.topics.kafka_items import prepared_to_json


class KafkaTaskWriter:
    """Writes one task attempt's rows into one transaction (Step 1 of the protocol): chunks are
    encoded as whole record batches (:class:`unaligned.sink.topics.kafka_batches.BatchChunkWriter`)
    and sent by a :class:`~unaligned.kafka.produce.produce_session.ProduceSession` on the process's
    kept connections."""

    def __init__(
        self,
        target: KafkaTarget,
        columns: KafkaColumns,
        client_kwargs: Mapping[str, Any],
        transactional_id: str,
        partition_id: int,
    ) -> None:
        self._target = target
        self._columns = columns
        self._client_kwargs = client_kwargs
        self._transactional_id = transactional_id
        self._writer: ProduceSession | None = None
        self._partition_id = partition_id
        self._batches: BatchChunkWriter | None = None

    def begin(self) -> None:
        session = ProduceSession(self._client_kwargs, self._transactional_id)
        self._writer = session
        session.begin()
        self._batches = BatchChunkWriter(self._target, self._columns, session)

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        self._open_writer()
        assert self._batches is not None
        self._batches.write_chunk(chunk)

    def _open_writer(self) -> ProduceSession:
        if self._writer is None:
            raise TransactionWriteError(
                f"transaction {self._transactional_id!r} was not begun before writing"
            )
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
        return prepared_to_json(prepared, self._partition_id)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
