"""The Kafka sink's task side: a chunk of input rows -> encoded record batches, per partition.

:class:`BatchChunkWriter` picks every row's (topic, partition) column-wise
(:func:`unaligned.kafka.produce.row_routing.route_rows`: an explicit partition, else Kafka's murmur2
of the key, else a sticky partition per topic switched after every chunk), encodes each
partition's rows as v2 record batches straight from the Arrow buffers
(:func:`unaligned.kafka.records.record_encoder.encode_record_batches`; within ``batch.size``,
``max.request.size`` and each topic's ``max.message.bytes``,
:mod:`unaligned.kafka.produce.topic_limits`) and queues them in the task's transaction
(:meth:`unaligned.kafka.produce.produce_session.ProduceSession.send_batch`), in input order per
partition. A batch the broker refuses as too large all the same is split by the session and the
next chunk asks its topic's limit again; a record too large alone raises
:class:`TransactionWriteError` naming the limit and the input row. Record timestamps are the
input's ``timestamp`` column where it has one (milliseconds, as Spark's sink writes them), else
(and for a null) the time the chunk is encoded. With Schema Registry formats
(``valueFormat``/``keyFormat``) the columns are encoded and framed first
(:mod:`unaligned.registry.record_encoding`). ARCHITECTURE.md ("Processes", executor workers)
has the rest.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kafka.errors import MessageSizeTooLargeError

from unaligned._util.arrow import row_indices
from unaligned.errors import RecordFormatError, SchemaMismatchError, TransactionWriteError
from unaligned.kafka.produce import topic_limits
from unaligned.kafka.produce.partitioner import StickyPartition
from unaligned.kafka.produce.produce_queue import RecordOrigin
from unaligned.kafka.produce.produce_session import ProduceSession
from unaligned.kafka.produce.row_routing import route_rows
from unaligned.kafka.records.record_encoder import encode_record_batches, oversized_row
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.topics.kafka_columns import KafkaColumns


def _checked_headers(column: pa.Array | None) -> pa.Array | None:
    """The headers column, refusing a null header key or value (Kafka's producer would)."""
    if column is None:
        return None
    entries = pc.list_flatten(column)
    if entries.null_count or any(
        pc.struct_field(entries, name).null_count for name in ("key", "value")
    ):
        raise SchemaMismatchError(
            "Kafka sink input column 'headers' has a null header key or value; "
            "the producer needs a string key and a binary value"
        )
    return column


def _rows_of(column: pa.Array | None, take: pa.Array | None) -> pa.Array | None:
    return column if column is None or take is None else column.take(take)


def _column(chunk: pa.RecordBatch, index: int | None) -> pa.Array | None:
    return None if index is None else chunk.column(index)


def _record_origin(chunk: pa.RecordBatch, take: pa.Array | None, rows_before: int) -> RecordOrigin:
    """Record ``i`` of the chunk's encoding (rows grouped by partition) -> its input row in
    words: its position in the task's input and, if the input has one (e.g. straight from a
    Kafka source), its ``offset`` column."""
    names = [name.lower() for name in chunk.schema.names]
    offsets = chunk.column(names.index("offset")) if "offset" in names else None

    def describe(record: int) -> str:
        row = record if take is None else int(take[record].as_py())
        text = f"input row {rows_before + row} of the task"
        if offsets is not None and pa.types.is_integer(offsets.type):
            text += f", whose offset column is {offsets[row].as_py()}"
        return text

    return describe


class BatchChunkWriter:
    """Writes chunks into ``writer``'s session (an open transaction, or an idempotent
    producer's) as encoded batches (module docstring).

    Keeps each topic's sticky partition across chunks; one instance per task attempt.
    """

    def __init__(
        self, target: KafkaTarget, columns: KafkaColumns, writer: ProduceSession[Any]
    ) -> None:
        self._target = target
        self._columns = columns
        self._writer = writer
        self._sticky: dict[str, StickyPartition] = {}
        self._counts: dict[str, int] = {}
        self._limits: dict[str, int | None] = {}
        self._rows_seen = 0

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        rows = chunk.num_rows
        if rows == 0:
            return
        self.forget_refused_limits()
        rows_before, self._rows_seen = self._rows_seen, self._rows_seen + rows
        cols = self._columns
        values = chunk.column(cols.value)
        keys = _column(chunk, cols.key)
        headers = _checked_headers(_column(chunk, cols.headers))
        topics = self._target.topic
        if topics is None:
            assert cols.topic is not None  # kafka_columns requires option or column
        if self._target.formats is not None:
            values, keys = self._encoded(chunk, values, keys)
        self._counts.clear()
        try:
            groups = route_rows(
                topics if topics is not None else chunk.column(cols.topic),
                keys,
                _column(chunk, cols.partition),
                rows,
                self._partition_count,
                self._sticky,
            )
        except ValueError as exc:
            raise TransactionWriteError(f"{self._writer.describe()}: {exc}") from exc
        compression, batch_size, max_request_size = self._writer.batch_settings()
        topic_bound = self._topic_bound({group.topic for group in groups}, compression)
        if topic_bound is not None and topic_bound[0] < max_request_size:
            batch_size = min(batch_size, topic_bound[0])
            max_request_size = topic_bound[0]
        # One encoding pass for the whole chunk: rows reordered group by group (row order kept
        # within each), batches never spanning two groups.
        counts = np.array([group.count for group in groups], np.int64)
        firsts = np.zeros(len(groups), np.int64)
        np.cumsum(counts[:-1], out=firsts[1:])
        take = None if len(groups) == 1 else row_indices(np.concatenate([g.rows for g in groups]))
        # One partition: encoded with its producer fields, sent as is (else stamped per batch).
        producer = (
            self._writer.producer_state(groups[0].topic, groups[0].partition)
            if len(groups) == 1
            else None
        )
        try:
            batches = encode_record_batches(
                _rows_of(keys, take),
                _rows_of(values, take),
                headers=_rows_of(headers, take),
                timestamps=_rows_of(_column(chunk, cols.timestamp), take),
                compression=compression,
                batch_size=batch_size,
                max_request_size=max_request_size,
                producer=producer,
                now_ms=int(time.time() * 1000),
                group_starts=firsts,
            )
        except MessageSizeTooLargeError as exc:
            row = oversized_row(exc)
            where = "" if row is None else f" ({_record_origin(chunk, take, rows_before)(row)})"
            if topic_bound is None or topic_bound[0] != max_request_size:
                raise TransactionWriteError(
                    f"could not encode {rows} record(s) for {self._writer.describe()}: {exc}{where}"
                ) from exc
            raise TransactionWriteError(
                f"{self._writer.describe()}: a record is too large for "
                f"{topic_bound[1]}{where}: its record batch would exceed {topic_bound[0]} bytes "
                "(the limit less room for the codec). Raise the topic's max.message.bytes (and "
                "kafka.max.request.size if needed), or write smaller records"
            ) from exc
        except Exception as exc:  # a codec failing...
            raise TransactionWriteError(
                f"could not encode {rows} record(s) for {self._writer.describe()}: {exc!r}"
            ) from exc
        group_of = np.searchsorted(firsts, [b.start for b in batches], "right") - 1
        origin = _record_origin(chunk, take, rows_before)
        try:
            for batch, g in zip(batches, group_of.tolist(), strict=True):
                self._writer.send_batch(
                    groups[g].topic,
                    groups[g].partition,
                    batch.data,
                    batch.record_count,
                    batch.payload_bytes,
                    wake_sender=False,
                    origin=origin,
                    first_record=batch.start,
                )
        finally:
            self._writer.wake_sender()

    def _encoded(
        self, chunk: pa.RecordBatch, values: pa.Array, keys: pa.Array | None
    ) -> tuple[pa.Array, pa.Array | None]:
        """``value``/``key`` encoded with their Schema Registry formats
        (:mod:`unaligned.registry.record_encoding`)."""
        from unaligned.registry.record_encoding import encode_column

        formats = self._target.formats
        assert formats is not None
        cols = self._columns
        topics = self._target.topic
        per_row = topics if topics is not None else chunk.column(cols.topic)
        try:
            if formats.value is not None:
                raw = _column(chunk, cols.value_raw)
                values = encode_column(formats, formats.value, values, raw, per_row)
            if formats.key is not None and keys is not None:
                raw = _column(chunk, cols.key_raw)
                keys = encode_column(formats, formats.key, keys, raw, per_row)
        except RecordFormatError as exc:
            raise TransactionWriteError(
                f"transaction {self._writer.transactional_id!r}: {exc}"
            ) from exc
        return values, keys

    def forget_refused_limits(self) -> None:
        """Forget the known limit of every topic that refused a batch as too large since the
        last call (here and in the process's cache): the next chunk asks it again."""
        refused = self._writer.take_refused_topics()
        if refused:
            topic_limits.forget(self._target.client_kwargs(), refused)
            for topic in refused:
                self._limits.pop(topic, None)

    def _topic_bound(self, topics: set[str], compression: str) -> tuple[int, str] | None:
        """The smallest batch limit of ``topics`` (:func:`topic_limits.batch_limit`) and a text
        naming it (``None``: no topic's limit is known)."""
        unknown = topics - self._limits.keys()
        if unknown:
            kwargs = self._target.client_kwargs()
            self._limits.update(topic_limits.max_message_bytes(kwargs, unknown))
        known = [(limit, t) for t in sorted(topics) if (limit := self._limits[t]) is not None]
        if not known:
            return None
        limit, topic = min(known)
        return (
            topic_limits.batch_limit(limit, compression),
            f"topic {topic!r} (max.message.bytes={limit})",
        )

    def _partition_count(self, topic: str) -> int:
        """The topic's partition count, looked up once per chunk."""
        count = self._counts.get(topic)
        if count is None:
            count = self._counts[topic] = self._writer.partition_count(topic)
        return count
