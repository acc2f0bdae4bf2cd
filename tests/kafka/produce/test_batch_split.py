"""Splitting a refused record batch: same records, offsets 0.., sequences continuing."""

from __future__ import annotations

import random
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords
from tests.kafka.records.test_record_encoder import CODECS, columns, random_rows

from unaligned.kafka.produce.batch_split import record_count, split_batch
from unaligned.kafka.records.record_batch_layout import ProducerState
from unaligned.kafka.records.record_encoder import encode_record_batches


def _read(data: bytes) -> tuple[DefaultRecordBatch, list[tuple[object, ...]]]:
    records = MemoryRecords(data)
    batch = records.next_batch()
    assert not records.has_next()
    assert isinstance(batch, DefaultRecordBatch)
    assert batch.validate_crc()
    read = list(batch)
    assert [r.offset for r in read] == list(range(batch.records_count))
    assert batch.last_offset_delta == batch.records_count - 1
    assert batch.max_timestamp == max(r.timestamp for r in read)
    return batch, [(r.key, r.value, list(r.headers), r.timestamp) for r in read]


@pytest.mark.parametrize("compression", CODECS)
def test_halves_hold_the_records_in_order_from_the_same_base_sequence(compression: str) -> None:
    rows = random_rows(random.Random(5), 41)
    state = ProducerState(producer_id=77, producer_epoch=3, base_sequence=1000, transactional=True)
    (whole,) = encode_record_batches(
        **columns(rows), compression=compression, batch_size=1 << 22, producer=state
    )
    _, expected = _read(whole.data)
    first, second, half = split_batch(whole.data)
    assert half == 20 and record_count(first) == 20 and record_count(second) == 21
    batch1, records1 = _read(first)
    batch2, records2 = _read(second)
    assert records1 + records2 == expected
    for batch in (batch1, batch2):
        assert (batch.producer_id, batch.producer_epoch) == (77, 3)
        assert batch.is_transactional
        assert batch.compression_type == struct.unpack_from(">h", whole.data, 21)[0] & 7
    assert (batch1.base_sequence, batch2.base_sequence) == (1000, 1020)


def test_sequences_wrap_past_int32_max_and_a_single_record_is_not_split() -> None:
    rows = random_rows(random.Random(6), 4)
    state = ProducerState(7, 0, 2**31 - 2, transactional=True)
    (whole,) = encode_record_batches(**columns(rows), batch_size=1 << 20, producer=state)
    first, second, _ = split_batch(whole.data)
    assert _read(first)[0].base_sequence == 2**31 - 2
    assert _read(second)[0].base_sequence == 0
    (one,) = encode_record_batches(**columns(rows[:1]), producer=state)
    with pytest.raises(ValueError, match="cannot be split"):
        split_batch(one.data)
