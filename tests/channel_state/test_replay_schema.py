"""Replaying channel state after the sink's input columns changed (issue 8.3): columns are
mapped by name, a new nullable column is filled with nulls, and a change replay cannot bridge
stops before the first row with the columns and the way out."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from channel_state_rows import KAFKA_SCHEMA, kafka_batch, kafka_rows, rows_of, write_state
from unaligned.channel_state.reader import check_replayable, read_channel_state
from unaligned.channel_state.refs import FileChannelState
from unaligned.channel_state.replay_schema import convertible, plan_replay
from unaligned.errors import SchemaMismatchError


def reordered(schema: pa.Schema, names: list[str]) -> pa.Schema:
    return pa.schema([schema.field(name) for name in names])


@pytest.mark.parametrize("threshold", [0, 10_000_000], ids=["file", "inline"])
def test_reordered_columns_are_replayed_by_name(tmp_path: Path, threshold: int) -> None:
    ref = write_state(tmp_path, [kafka_batch(120)], inline_threshold_bytes=threshold)
    now = reordered(KAFKA_SCHEMA, ["value", "headers", "key", "partition", "topic"])
    batches = list(read_channel_state(ref, batch_rows=50, target_schema=now))
    assert batches and all(batch.schema.equals(now) for batch in batches)
    assert rows_of(batches) == kafka_rows(120)  # dicts: every value under its own name
    # by position, the first column is now the value, never the key
    first = batches[0]
    assert first.column(0).to_pylist() == [row["value"] for row in kafka_rows(50)]
    # carried forward: the same mapping from a later start row
    assert (
        rows_of(read_channel_state(ref.advanced(70), batch_rows=8, target_schema=now))
        == (kafka_rows(120)[70:])
    )


def test_a_new_nullable_column_is_filled_with_nulls(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(30)])
    now = pa.schema([pa.field("note", pa.string()), *KAFKA_SCHEMA])
    got = rows_of(read_channel_state(ref, batch_rows=100, target_schema=now))
    assert got == [{"note": None, **row} for row in kafka_rows(30)]


def test_names_match_case_insensitively_as_in_spark(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(10)])
    now = pa.schema([field.with_name(field.name.upper()) for field in KAFKA_SCHEMA])
    got = rows_of(read_channel_state(ref, batch_rows=100, target_schema=now))
    assert got == [{k.upper(): v for k, v in row.items()} for row in kafka_rows(10)]


def test_a_new_non_nullable_column_stops_replay_with_the_way_out(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(10)], inline_threshold_bytes=0)
    now = pa.schema([*KAFKA_SCHEMA, pa.field("tenant", pa.string(), nullable=False)])
    with pytest.raises(SchemaMismatchError) as caught:
        read_channel_state(ref, batch_rows=100, target_schema=now)
    message = str(caught.value)
    assert "column 'tenant' (string, non-nullable) is new" in message
    assert ref.describe() in message  # the file and the barrier
    assert "the previous query, whose sink input columns were [key binary, value binary" in message
    assert "trigger(availableNow=True)" in message and "checkpointMode=aligned" in message


def test_a_column_the_sink_writes_may_not_disappear(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(10)])
    now = reordered(KAFKA_SCHEMA, ["value", "topic", "partition", "headers"])  # no key
    with pytest.raises(SchemaMismatchError, match="column 'key' \\(binary\\) is gone"):
        read_channel_state(ref, batch_rows=100, target_schema=now)
    kafka_sink_columns = {"key", "value", "topic", "partition", "headers"}
    with pytest.raises(SchemaMismatchError, match="column 'key' \\(binary\\) is gone"):
        read_channel_state(ref, batch_rows=100, target_schema=now, sink_columns=kafka_sink_columns)
    # a column the sink never wrote (the Kafka sink ignores extra columns) may go
    got = rows_of(
        read_channel_state(
            ref, batch_rows=100, target_schema=now, sink_columns={"value", "partition"}
        )
    )
    assert got == [{k: v for k, v in row.items() if k != "key"} for row in kafka_rows(10)]


def test_an_incompatible_type_change_stops_replay(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(10)])
    now = KAFKA_SCHEMA.set(3, pa.field("partition", pa.string()))
    with pytest.raises(SchemaMismatchError, match="'partition' changed type from int32 to string"):
        read_channel_state(ref, batch_rows=100, target_schema=now)
    narrower = KAFKA_SCHEMA.set(3, pa.field("partition", pa.int16()))
    with pytest.raises(SchemaMismatchError, match="from int32 to int16"):
        read_channel_state(ref, batch_rows=100, target_schema=narrower)


def test_lossless_type_changes_are_converted(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(25)])
    now = KAFKA_SCHEMA.set(1, pa.field("value", pa.large_binary())).set(
        3, pa.field("partition", pa.int64())
    )
    batches = list(read_channel_state(ref, batch_rows=10, target_schema=now))
    assert batches and all(batch.schema.equals(now) for batch in batches)
    assert rows_of(batches) == kafka_rows(25)


def test_binary_to_string_checks_every_value(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("value", pa.binary())])
    good = pa.record_batch([pa.array([b"caf\xc3\xa9", None])], schema=schema)
    ref = write_state(tmp_path, [good], schema=schema)
    now = pa.schema([pa.field("value", pa.string())])
    assert rows_of(read_channel_state(ref, batch_rows=10, target_schema=now)) == [
        {"value": "café"},
        {"value": None},
    ]
    bad = pa.record_batch([pa.array([b"ok", b"\xff\xfe"])], schema=schema)
    bad_ref = write_state(tmp_path, [bad], schema=schema, barrier_id=8)
    with pytest.raises(SchemaMismatchError, match="column 'value' cannot be replayed as string"):
        rows_of(read_channel_state(bad_ref, batch_rows=10, target_schema=now))


def test_a_null_in_a_column_now_declared_non_nullable_stops_replay(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(10)])  # row 0 has a null key
    now = KAFKA_SCHEMA.set(0, pa.field("key", pa.binary(), nullable=False))
    with pytest.raises(SchemaMismatchError, match="'key' holds nulls .* non-nullable"):
        rows_of(read_channel_state(ref, batch_rows=100, target_schema=now))
    # without nulls in the rows, a non-nullable column is fine
    no_null_keys = write_state(tmp_path, [kafka_batch(2, start=1)], barrier_id=9)
    got = rows_of(read_channel_state(no_null_keys, batch_rows=100, target_schema=now))
    assert got == kafka_rows(2, start=1)


def test_check_replayable_reads_only_the_headers(tmp_path: Path) -> None:
    file_ref = write_state(tmp_path, [kafka_batch(300)], inline_threshold_bytes=0)
    inline_ref = write_state(tmp_path, [kafka_batch(3)], barrier_id=8)
    assert isinstance(file_ref, FileChannelState)
    now = reordered(KAFKA_SCHEMA, ["value", "key", "topic", "partition", "headers"])
    check_replayable([file_ref, inline_ref], now)
    with pytest.raises(SchemaMismatchError, match="barrier 8, task 3.*'key'"):
        check_replayable([inline_ref, file_ref], now.remove(1))
    # an exhausted ref has nothing left to replay
    check_replayable([file_ref.advanced(300)], now.remove(1))


def test_convertible_rules() -> None:
    assert convertible(pa.int8(), pa.int64()) and not convertible(pa.int64(), pa.int8())
    assert convertible(pa.uint16(), pa.int32()) and not convertible(pa.uint32(), pa.int32())
    assert not convertible(pa.int32(), pa.uint64())
    assert convertible(pa.float32(), pa.float64()) and not convertible(pa.int64(), pa.float64())
    assert convertible(pa.string(), pa.binary()) and convertible(pa.binary(), pa.large_string())
    assert convertible(pa.timestamp("ms", "UTC"), pa.timestamp("us", "Europe/Paris"))
    assert not convertible(pa.timestamp("us"), pa.timestamp("ms"))
    assert convertible(pa.decimal128(10, 2), pa.decimal128(12, 3))
    assert not convertible(pa.decimal128(10, 2), pa.decimal128(10, 3))
    element = pa.field("element", pa.int32(), nullable=False)
    assert convertible(pa.list_(element), pa.list_(pa.int64()))
    assert convertible(
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        pa.struct([("a", pa.int64()), ("b", pa.binary())]),
    )
    assert not convertible(
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        pa.struct([("b", pa.string()), ("a", pa.int32())]),
    )
    assert not convertible(pa.string(), pa.int64())


def test_same_schema_is_replayed_as_stored() -> None:
    mapping = plan_replay(KAFKA_SCHEMA, KAFKA_SCHEMA, where="w")
    batch = kafka_batch(3)
    assert mapping.identity and mapping.apply(batch) is batch
