"""Micro-benchmark (a script, not a test): encoding Kafka v2 record batches from Arrow columns
(unaligned.kafka.records.record_encoder) against kafka-python's DefaultRecordBatchBuilder.append per
record, and the column-wise murmur2 partitioner against kafka-python's per-key murmur2.

    .venv/bin/python integration/benchmarks/bench_encoder.py [--records N] [--chunk ROWS]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pyarrow as pa
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.record.default_records import DefaultRecordBatchBuilder

from unaligned.kafka.produce.partitioner import assign_partitions
from unaligned.kafka.records.record_encoder import encode_record_batches


def _columns(records: int) -> tuple[pa.Array, pa.Array]:
    keys = pa.Array.from_buffers(
        pa.binary(),
        records,
        [
            None,
            pa.py_buffer(np.arange(0, 8 * records + 1, 8, dtype=np.int32)),
            pa.py_buffer(os.urandom(8 * records)),
        ],
    )
    values = pa.Array.from_buffers(
        pa.binary(),
        records,
        [
            None,
            pa.py_buffer(np.arange(0, 100 * records + 1, 100, dtype=np.int32)),
            pa.py_buffer(os.urandom(100 * records)),
        ],
    )
    return keys, values


def bench_encoder(
    keys: pa.Array, values: pa.Array, chunk: int, batch_size: int, codec: str
) -> float:
    start = time.perf_counter()
    total = 0
    for lo in range(0, len(keys), chunk):
        batches = encode_record_batches(
            keys.slice(lo, chunk),
            values.slice(lo, chunk),
            compression=codec,
            batch_size=batch_size,
            now_ms=1_700_000_000_000,
        )
        total += sum(b.record_count for b in batches)
    assert total == len(keys)
    return len(keys) / (time.perf_counter() - start)


def bench_kafka_python(keys: list[bytes], values: list[bytes], batch_size: int) -> float:
    start = time.perf_counter()
    builder = DefaultRecordBatchBuilder(2, 0, True, 1, 0, 0, batch_size)
    delta = 0
    for key, value in zip(keys, values, strict=True):
        if builder.append(delta, 1_700_000_000_000, key, value, []) is None:
            builder.build()
            builder = DefaultRecordBatchBuilder(2, 0, True, 1, 0, 0, batch_size)
            delta = 0
            builder.append(delta, 1_700_000_000_000, key, value, [])
        delta += 1
    builder.build()
    return len(keys) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=10_000, help="rows per encoder call")
    args = parser.parse_args()
    keys, values = _columns(args.records)
    for batch_size in (16_384, 1_048_576):
        for codec in ("none", "lz4"):
            rate = bench_encoder(keys, values, args.chunk, batch_size, codec)
            print(
                f"encoder  batch.size={batch_size:>9} {codec:>5} chunk={args.chunk}: "
                f"{rate:12,.0f} records/s"
            )
    rate = bench_encoder(keys, values, args.records, 16_384, "none")
    print(f"encoder  batch.size=    16384  none chunk=all:   {rate:12,.0f} records/s")
    key_list, value_list = keys.to_pylist(), values.to_pylist()
    rate = bench_kafka_python(key_list, value_list, 16_384)
    print(f"kafka-python DefaultRecordBatchBuilder.append (16384): {rate:12,.0f} records/s")
    start = time.perf_counter()
    assign_partitions(keys, 12)
    rate = args.records / (time.perf_counter() - start)
    print(f"partitioner (column murmur2): {rate:12,.0f} keys/s")
    sample = key_list[:100_000]
    start = time.perf_counter()
    for key in sample:
        (kafka_python_murmur2(key) & 0x7FFFFFFF) % 12
    print(
        f"kafka-python murmur2 per key: {len(sample) / (time.perf_counter() - start):12,.0f} keys/s"
    )


if __name__ == "__main__":
    main()
