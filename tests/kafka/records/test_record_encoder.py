"""Record batches written by the columnar encoder (record_encoder.py, record_batch_layout.py),
read back field for field by kafka-python's own record reader and by the project's decoder."""

from __future__ import annotations

import os
import random
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from kafka.errors import MessageSizeTooLargeError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.records.record_batch_layout import (
    ProducerState,
    codec_id,
    has_producer_state,
    increment_sequence,
    with_producer_state,
)
from unaligned.kafka.records.record_decoder import decode_record_batches
from unaligned.kafka.records.record_encoder import EncodedBatch, encode_record_batches

TP = TopicPartitionId("out", 0)
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def random_rows(rng: random.Random, n: int) -> list[Row]:
    rows: list[Row] = []
    for i in range(n):
        size = rng.choice([0, 1, 63, 64, 65, 100, 300, 8191, 8192, 8200, 20_000])
        key = None if i % 7 == 0 else os.urandom(rng.choice([0, 1, 8, 70]))
        value = None if i % 11 == 0 else os.urandom(size)
        headers = [(f"h{j}-ä", None if j == 1 else os.urandom(j * 40)) for j in range(i % 4)]
        rows.append((key, value, headers, 1_700_000_000_000 + rng.randint(-100_000, 5_000_000)))
    return rows


def columns(rows: list[Row]) -> dict[str, Any]:
    return {
        "keys": pa.array([r[0] for r in rows], pa.binary()),
        "values": pa.array([r[1] for r in rows], pa.binary()),
        "headers": pa.array(
            [[{"key": k, "value": v} for k, v in r[2]] if r[2] else None for r in rows],
            HEADERS_TYPE,
        ),
        "timestamps": pa.array([r[3] for r in rows], pa.int64()),
    }


def read_with_kafka_python(batches: list[EncodedBatch]) -> list[tuple[Any, ...]]:
    """Every record, checking each batch's CRC, framing and row range on the way."""
    out: list[tuple[Any, ...]] = []
    for encoded in batches:
        records = MemoryRecords(encoded.data)
        batch = records.next_batch()
        assert not records.has_next()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        assert batch.magic == 2 and batch.base_offset == 0 and batch.leader_epoch == -1
        assert batch.size_in_bytes == len(encoded.data)
        assert batch.records_count == encoded.record_count
        assert batch.last_offset_delta == encoded.record_count - 1
        records_read = list(batch)
        assert [r.offset for r in records_read] == list(range(encoded.record_count))
        assert batch.first_timestamp == records_read[0].timestamp
        assert batch.max_timestamp == max(r.timestamp for r in records_read)
        out += [(r.key, r.value, list(r.headers), r.timestamp) for r in records_read]
    return out


def read_with_decoder(batches: list[EncodedBatch]) -> list[tuple[Any, ...]]:
    columns = decode_record_batches(
        b"".join(b.data for b in batches), TP, 0, include_headers=True, check_crcs=True
    ).columns
    assert columns is not None
    headers = columns.headers.to_pylist() if columns.headers is not None else [None] * len(columns)
    return [
        (k, v, [(h["key"], h["value"]) for h in hs or []], t)
        for k, v, hs, t in zip(
            columns.keys.to_pylist(),
            columns.values.to_pylist(),
            headers,
            columns.timestamps_ms.tolist(),
            strict=True,
        )
    ]


@pytest.mark.parametrize("compression", CODECS)
def test_batches_decode_field_for_field_with_kafka_python_and_the_decoder(compression: str) -> None:
    rows = random_rows(random.Random(11), 300)
    state = ProducerState(producer_id=4242, producer_epoch=7, base_sequence=100, transactional=True)
    batches = encode_record_batches(
        **columns(rows), compression=compression, batch_size=64 * 1024, producer=state
    )
    assert len(batches) > 3
    assert [b.start for b in batches] == [0] + [b.stop for b in batches[:-1]]
    assert batches[-1].stop == len(rows)
    expected = [(k, v, h, t) for k, v, h, t in rows]
    assert read_with_kafka_python(batches) == expected
    assert read_with_decoder(batches) == expected
    for encoded in batches:
        batch = DefaultRecordBatch(encoded.data)
        assert batch.compression_type == codec_id(compression)
        assert batch.is_transactional and not batch.is_control_batch
        assert (batch.producer_id, batch.producer_epoch) == (4242, 7)
        assert batch.base_sequence == 100 + encoded.start


def test_without_producer_state_or_timestamps() -> None:
    keys = pa.array([b"a", None, b""], pa.binary())
    values = pa.array([None, b"", b"x" * 70], pa.binary())
    batches = encode_record_batches(keys, values, now_ms=1_234)
    assert len(batches) == 1
    batch = DefaultRecordBatch(batches[0].data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert not batch.is_transactional and batch.compression_type == 0
    assert [(r.key, r.value, r.timestamp, r.headers) for r in batch] == [
        (b"a", None, 1_234, []),
        (None, b"", 1_234, []),
        (b"", b"x" * 70, 1_234, []),
    ]


@pytest.mark.parametrize("compression", CODECS)
def test_same_as_kafka_pythons_builder(compression: str) -> None:
    """Same fields in, the same batch out: byte for byte uncompressed (once the leader epoch,
    which kafka-python writes as 0, is patched), record for record compressed."""
    rows = [
        (f"k{i}".encode(), b"value %d " % i * 20, [("h", b"v")] * (i % 2), 1_000 + i)
        for i in range(50)
    ]
    state = ProducerState(9, 1, 5, True)
    (ours,) = encode_record_batches(
        **columns(rows), compression=compression, batch_size=1 << 20, producer=state
    )
    builder = DefaultRecordBatchBuilder(2, codec_id(compression), True, 9, 1, 5, 1 << 20)
    for i, (key, value, headers, ts) in enumerate(rows):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    theirs = bytes(builder.build())
    if compression == "none":
        patched = bytearray(ours.data)
        struct.pack_into(">i", patched, 12, 0)  # leader epoch
        assert with_producer_state(bytes(patched), state) == theirs  # (recomputes the CRC)
    their_batch = DefaultRecordBatch(theirs)
    assert their_batch.compression_type == codec_id(compression)  # it did compress
    assert DefaultRecordBatch(ours.data).attributes == their_batch.attributes
    assert read_with_kafka_python([ours]) == [
        (r.key, r.value, list(r.headers), r.timestamp) for r in their_batch
    ]


def test_string_sliced_and_large_columns() -> None:
    keys = pa.array(["skip", "ключ", None, "k"], pa.string()).slice(1)
    values = pa.array([b"skip", b"v1", b"v2", None], pa.large_binary()).slice(1)
    (batch,) = encode_record_batches(keys, values, timestamps=np.array([5, 1, 9]))
    assert read_with_kafka_python([batch]) == [
        ("ключ".encode(), b"v1", [], 5),
        (None, b"v2", [], 1),
        (b"k", None, [], 9),
    ]
    chunked = pa.chunked_array([pa.array([b"a"]), pa.array([b"b", b"c"])])
    (batch,) = encode_record_batches(None, chunked, now_ms=0)
    assert [r[:2] for r in read_with_kafka_python([batch])] == [
        (None, b"a"),
        (None, b"b"),
        (None, b"c"),
    ]


def test_null_slots_spanning_bytes_are_skipped() -> None:
    """Arrow allows a null slot to span data bytes; they must not leak into the next value."""
    data = pa.py_buffer(b"aaXXXbb")
    offsets = pa.py_buffer(np.array([0, 2, 5, 7], np.int32).tobytes())
    validity = pa.py_buffer(np.packbits([True, False, True], bitorder="little").tobytes())
    values = pa.Array.from_buffers(pa.binary(), 3, [validity, offsets, data], null_count=1)
    (batch,) = encode_record_batches(None, values, now_ms=0)
    assert [r[1] for r in read_with_kafka_python([batch])] == [b"aa", None, b"bb"]


def test_timestamp_columns_and_nulls() -> None:
    ts = pa.array([1_500, None, 2_000_999], pa.timestamp("us", tz="UTC"))
    (batch,) = encode_record_batches(None, pa.array([b"a", b"b", b"c"]), timestamps=ts, now_ms=77)
    assert [r[3] for r in read_with_kafka_python([batch])] == [1, 77, 2_000]


def same_time_columns(rows: list[Row]) -> dict[str, Any]:
    """:func:`columns` without a timestamp column: every record takes ``now_ms`` (the rows'
    timestamps must all be that), as the sink encodes a chunk."""
    (now,) = {r[3] for r in rows}
    return {**{k: v for k, v in columns(rows).items() if k != "timestamps"}, "now_ms": now}


@pytest.mark.parametrize("same_time", [False, True], ids=["timestamps", "one-time"])
def test_batch_size_bounds_every_batch(same_time: bool) -> None:
    rng = random.Random(5)
    rows = [
        (os.urandom(8), os.urandom(rng.randint(0, 400)), [], 10_000 if same_time else 10_000 + i)
        for i in range(3000)
    ]
    # small records: more than 64 a batch (two-byte offset deltas)
    rows += [(None, os.urandom(rng.randint(0, 6)), [], 10_000) for _ in range(3000)]
    if not same_time:
        rows[3000:] = [(k, v, h, 20_000 + i) for i, (k, v, h, _) in enumerate(rows[3000:])]
    cols = same_time_columns if same_time else columns
    for batch_size in (200, 1_000, 16_384, 100_000):
        batches = encode_record_batches(**cols(rows), batch_size=batch_size)
        for encoded in batches:
            assert len(encoded.data) <= batch_size or encoded.record_count == 1
        # greedy: the next row would not have fit
        for encoded, after in zip(batches, batches[1:], strict=False):
            grown = encode_record_batches(
                **cols(rows[encoded.start : after.start + 1]), batch_size=1 << 30
            )
            assert len(grown[0].data) > batch_size
        assert read_with_kafka_python(batches) == [(k, v, h, t) for k, v, h, t in rows]
    assert max(b.record_count for b in batches) > 64


@pytest.mark.parametrize("same_time", [False, True], ids=["timestamps", "one-time"])
def test_many_records_per_batch_need_multi_byte_offset_deltas(same_time: bool) -> None:
    rows = [(None, b"", [], 5 if same_time else 5 + (i % 3) * 10**9) for i in range(20_000)]
    cols = same_time_columns if same_time else columns
    (batch,) = encode_record_batches(**cols(rows), batch_size=1 << 30)
    assert read_with_decoder([batch]) == [(None, b"", [], t) for _, _, _, t in rows]
    assert len(read_with_kafka_python([batch])) == 20_000


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_large_inputs_are_encoded_in_groups_of_batches(compression: str) -> None:
    rng = random.Random(9)
    rows = [
        (
            None if i % 5 == 0 else b"k%d" % i,
            os.urandom(rng.randint(0, 150)),
            [("n", b"%d" % i)] * (i % 3),
            1_000 + rng.randint(0, 10),
        )
        for i in range(30_000)
    ]
    state = ProducerState(3, 1, 0, True)
    batches = encode_record_batches(**columns(rows), compression=compression, producer=state)
    assert [b.start for b in batches] == [0] + [b.stop for b in batches[:-1]]
    expected = [(k, v, h, t) for k, v, h, t in rows]
    assert read_with_decoder(batches) == expected
    assert read_with_kafka_python(batches) == expected
    assert [DefaultRecordBatch(b.data).base_sequence for b in batches] == [b.start for b in batches]


def test_a_record_over_max_request_size_is_refused() -> None:
    values = pa.array([b"ok", b"x" * 2_000])
    with pytest.raises(MessageSizeTooLargeError, match="row 1"):
        encode_record_batches(None, values, max_request_size=1_000)
    # over batch.size but within max.request.size: a batch of its own
    batches = encode_record_batches(None, values, batch_size=500, max_request_size=5_000)
    assert [(b.start, b.stop) for b in batches] == [(0, 1), (1, 2)]


def test_sequences_wrap_like_kafka_and_can_be_set_later() -> None:
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 5) == 3
    values = pa.array([b"x" * 100] * 10)
    batches = encode_record_batches(
        None, values, batch_size=300, producer=ProducerState(1, 0, 2**31 - 2, True)
    )
    sequences = [DefaultRecordBatch(b.data).base_sequence for b in batches]
    assert sequences == [increment_sequence(2**31 - 2, b.start) for b in batches]
    assert sequences == [2**31 - 2, 0, 2, 4, 6]  # two rows a batch
    patched = with_producer_state(batches[0].data, ProducerState(77, 3, 12, False))
    batch = DefaultRecordBatch(patched)
    assert batch.validate_crc() and not batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 12)
    assert has_producer_state(patched, ProducerState(77, 3, 12, False))
    assert has_producer_state(batches[1].data, ProducerState(1, 0, 0, True))
    for other in (
        ProducerState(1, 0, 0, False),
        ProducerState(1, 1, 0, True),
        ProducerState(2, 0, 0, True),
        ProducerState(1, 0, 2, True),
    ):
        assert not has_producer_state(batches[1].data, other)


def test_bad_inputs() -> None:
    assert encode_record_batches(None, None) == []
    assert encode_record_batches(None, pa.array([], pa.binary())) == []
    with pytest.raises(ValueError, match="compression.type"):
        encode_record_batches(None, pa.array([b"a"]), compression="brotli")
    with pytest.raises(TypeError, match="binary or string"):
        encode_record_batches(None, pa.array([1, 2]))
    with pytest.raises(TypeError, match="null key"):
        encode_record_batches(
            None, pa.array([b"a"]), headers=pa.array([[{"key": None, "value": b"v"}]], HEADERS_TYPE)
        )
    with pytest.raises(ValueError, match="rows"):
        encode_record_batches(pa.array([b"a", b"b"]), pa.array([b"a"]))


def test_group_starts_keep_batches_within_their_group() -> None:
    values = pa.array([b"v%d" % i for i in range(10)], pa.binary())
    batches = encode_record_batches(None, values, group_starts=[0, 3, 3, 7], now_ms=1)
    assert [(b.start, b.stop) for b in batches] == [(0, 3), (3, 7), (7, 10)]
    with pytest.raises(ValueError, match="start at row 0"):
        encode_record_batches(None, values, group_starts=[2])


def test_payload_bytes_count_key_value_and_header_bytes_like_the_per_record_path() -> None:
    keys = pa.array([b"key", None, "é".encode()], pa.binary())
    values = pa.array(["x" * 100, None, "yz"])
    headers = pa.array([[("hd", b"12345")], None, [("a", b""), ("é", b"1")]], HEADERS_TYPE)
    per_row = [3 + 100 + 2 + 5, 0, 2 + 2 + 1 + 0 + 2 + 1]
    (whole,) = encode_record_batches(keys, values, headers=headers)
    assert whole.payload_bytes == sum(per_row)
    one_each = encode_record_batches(keys, values, headers=headers, group_starts=[0, 1, 2])
    assert [b.payload_bytes for b in one_each] == per_row
    assert [b.payload_bytes for b in encode_record_batches(None, values)] == [102]
