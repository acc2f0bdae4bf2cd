"""Rows in the shape of the Kafka sink's input, and a channel-state writer with test defaults:
shared by the channel-state unit tests (importable because pyproject puts tests/ on the path)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from unaligned.channel_state.refs import ChannelStateRef
from unaligned.channel_state.writer import ChannelStateWriter

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
KAFKA_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", HEADER, nullable=False))),
    ]
)


def kafka_rows(count: int, start: int = 0, value_bytes: int = 100) -> list[dict]:
    rows = []
    for i in range(start, start + count):
        rows.append(
            {
                "key": None if i % 3 == 0 else f"key-{i}".encode(),
                "value": None if i % 7 == 0 else (f"{i:08d}".encode() * value_bytes)[:value_bytes],
                "topic": None if i % 11 == 0 else "events",
                "partition": None if i % 2 else i % 4,
                "headers": None
                if i % 5 == 0
                else [{"key": "h", "value": None}, {"key": "n", "value": str(i).encode()}][: i % 3],
            }
        )
    return rows


def kafka_batch(count: int, start: int = 0, value_bytes: int = 100) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(kafka_rows(count, start, value_bytes), schema=KAFKA_SCHEMA)


def make_writer(state_dir: Path | str, **overrides) -> ChannelStateWriter:
    options = dict(
        state_dir=str(state_dir),
        barrier_id=7,
        query_id="query-1",
        task_index=3,
        attempt="42",
        schema=KAFKA_SCHEMA,
    )
    options.update(overrides)
    return ChannelStateWriter(**options)


def write_state(state_dir: Path, batches: list[pa.RecordBatch], **overrides) -> ChannelStateRef:
    writer = make_writer(state_dir, **overrides)
    for batch in batches:
        writer.append(batch)
    return writer.finish()


def rows_of(batches) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]
