"""Channel state write and read throughput, per codec, for Kafka-like rows with 100-byte values.

Run: ``python -m benchmarks.bench_channel_state`` (or ``python -m benchmarks channel_state``).
Prints a table and writes ``integration/benchmarks/results/channel_state.json``.

Rows: key (16 bytes, 1 in 10 null), value (100 bytes), topic string, partition int, headers
(null in 3 of 4 rows). Two value payloads: ``random`` (incompressible) and ``text``
(JSON-like, compressible). MB/s counts key + value bytes of the input (10^6 bytes), so the
codecs compare on the same work; the file size column shows what each codec stores. The state
goes to a local file (inline threshold 0) with the writer's default block size; replay reads
10,000-row batches. Each figure is the best of ``REPEATS`` runs.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

from benchmarks import write_results
from unaligned.channel_state.codecs import CODECS, check_codec
from unaligned.channel_state.reader import read_channel_state
from unaligned.channel_state.writer import ChannelStateWriter
from unaligned.errors import OptionError

ROWS = 100_000
BATCH_ROWS = 10_000
VALUE_BYTES = 100
REPEATS = 3

SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field(
            "headers",
            pa.list_(
                pa.field(
                    "element",
                    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
                    nullable=False,
                )
            ),
        ),
    ]
)


def make_batches(payload: str) -> list[pa.RecordBatch]:
    rng = random.Random(7)
    batches = []
    for start in range(0, ROWS, BATCH_ROWS):
        keys, values, headers = [], [], []
        for i in range(start, start + BATCH_ROWS):
            keys.append(None if i % 10 == 0 else rng.randbytes(16))
            if payload == "random":
                values.append(rng.randbytes(VALUE_BYTES))
            else:
                text = f'{{"user":{rng.randrange(10**6)},"event":"click","page":"/p/{i % 97}",'
                values.append((text + '"pad":"' + "x" * VALUE_BYTES)[:VALUE_BYTES].encode())
            headers.append(None if i % 4 else [{"key": "trace", "value": rng.randbytes(8)}])
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(keys, pa.binary()),
                    pa.array(values, pa.binary()),
                    pa.array(["events"] * BATCH_ROWS, pa.string()),
                    pa.array([i % 8 for i in range(BATCH_ROWS)], pa.int32()),
                    pa.array(headers, SCHEMA.field("headers").type),
                ],
                schema=SCHEMA,
            )
        )
    return batches


def input_bytes(batches: list[pa.RecordBatch]) -> int:
    total = 0
    for batch in batches:
        for name in ("key", "value"):
            total += sum(len(v) for v in batch.column(name).to_pylist() if v is not None)
    return total


def measure(codec: str, batches: list[pa.RecordBatch], state_dir: str) -> dict[str, Any]:
    best_write = best_read = float("inf")
    file_bytes = 0
    for attempt in range(REPEATS):
        started = time.perf_counter()
        writer = ChannelStateWriter(
            state_dir=state_dir,
            barrier_id=attempt,
            query_id="bench",
            task_index=0,
            attempt="bench",
            schema=SCHEMA,
            codec=codec,
            inline_threshold_bytes=0,
        )
        for batch in batches:
            writer.append(batch)
        ref = writer.finish()
        best_write = min(best_write, time.perf_counter() - started)
        file_bytes = ref.byte_size

        started = time.perf_counter()
        rows = sum(b.num_rows for b in read_channel_state(ref, batch_rows=BATCH_ROWS))
        best_read = min(best_read, time.perf_counter() - started)
        assert rows == ROWS, (codec, rows)
    data_mb = input_bytes(batches) / 1e6
    return {
        "codec": codec,
        "rows": ROWS,
        "input_mb": round(data_mb, 2),
        "file_mb": round(file_bytes / 1e6, 2),
        "write_s": round(best_write, 3),
        "write_rows_per_s": round(ROWS / best_write),
        "write_mb_per_s": round(data_mb / best_write, 1),
        "read_s": round(best_read, 3),
        "read_rows_per_s": round(ROWS / best_read),
        "read_mb_per_s": round(data_mb / best_read, 1),
    }


def main() -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-channel-state-") as state_dir:
        for payload in ("random", "text"):
            batches = make_batches(payload)
            for codec in CODECS:
                try:
                    check_codec(codec)
                except OptionError as exc:
                    skipped[codec] = str(exc)
                    continue
                result = {"payload": payload, **measure(codec, batches, state_dir)}
                results.append(result)
                print(
                    f"{payload:>6} {codec:>9}: write {result['write_rows_per_s']:>9,} rows/s "
                    f"{result['write_mb_per_s']:>6} MB/s | read {result['read_rows_per_s']:>9,} "
                    f"rows/s {result['read_mb_per_s']:>6} MB/s | file {result['file_mb']} MB "
                    f"of {result['input_mb']} MB input",
                    flush=True,
                )
    for codec, reason in skipped.items():
        print(f"skipped {codec}: {reason}")
    report = {
        "benchmark": "channel_state",
        "python": sys.version.split()[0],
        "pyarrow": pa.__version__,
        "cpus": os.cpu_count(),
        "rows": ROWS,
        "value_bytes": VALUE_BYTES,
        "results": results,
        "skipped": skipped,
    }
    write_results("channel_state", report)
    return report


if __name__ == "__main__":
    main()
