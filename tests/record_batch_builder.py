"""Kafka v2 record batches as the broker stores them, built with kafka-python's own batch
builder: shared by the record decoder, record fields and columnar fetch unit tests."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def build_batch(
    base_offset: int,
    records: list[Record],
    *,
    compression: int = 0,
    producer_id: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: int | None = None,
) -> bytes:
    """A v2 record batch as the broker stores it (base offset and broker-set attributes patched)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 30,
    )
    for delta, (key, value, headers, ts) in enumerate(records):
        builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base_offset)
    attrs = struct.unpack_from(">h", buf, 21)[0]
    if control:
        attrs |= 0x20
    if log_append_time is not None:
        attrs |= 0x08
        struct.pack_into(">q", buf, 35, log_append_time)
    struct.pack_into(">h", buf, 21, attrs)
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def control_batch(offset: int, producer_id: int, commit: bool) -> bytes:
    marker = (struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0), [], 1_000)
    return build_batch(offset, [marker], producer_id=producer_id, transactional=True, control=True)
