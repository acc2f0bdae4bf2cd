"""Read throughput of ``format("unaligned")`` against kcat, on the embedded broker.

Run: ``python -m benchmarks source`` (or ``python -m benchmarks.bench_source``). Prints the
figures and writes ``integration/benchmarks/results/source.json``.

Data: 1,000,000 records with 100-byte values (no key, no headers, uncompressed) over 8
partitions, produced with ``kcat -P``. Measured, each the best of ``REPEATS`` runs:

- Spark: ``spark.readStream.format("unaligned")`` with ``Trigger.AvailableNow`` into the
  ``noop`` sink on ``local[N]`` (N = CPU count), after one warm-up query: timed from
  ``start()`` to termination (query start-up included), and the time inside the batch
  (``durationMs.triggerExecution``);
- the same read in one Python process without Spark (the source's executor-side reader over the
  8 partitions, one after the other): the decoding cost alone;
- the same reader over the ranges a micro-batch of the compare benchmark gives it
  (``maxOffsetsPerTrigger`` 250,000 over 8 partitions: 31,250 offsets a range), counting the
  records the decoder decoded per record returned (a range decodes at most the batch that holds
  its end beyond it);
- ``kcat -C -e -o beginning`` reading the topic (one offset per line, counted).

Needs ``kcat`` on PATH (Debian package ``kcat``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results
from benchmarks.compare.inputs import produce, uniform_counts

RECORDS = 1_000_000
PARTITIONS = 8
RANGE_OFFSETS = 250_000 // 8
VALUE_BYTES = 100
REPEATS = 2


def kcat_read(bootstrap: str, topic: str) -> float:
    started = time.monotonic()
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-o", "beginning", "-f", "%o\n"],
        check=True,
        capture_output=True,
    ).stdout
    elapsed = time.monotonic() - started
    lines = out.count(b"\n")
    if lines != RECORDS:
        raise RuntimeError(f"kcat read {lines} records, expected {RECORDS}")
    return elapsed


def python_read(bootstrap: str, topic: str, end_offsets: dict[int, int]) -> float:
    from unaligned.kafka.partitions import TopicPartitionId
    from unaligned.source.options import SourceOptions
    from unaligned.source.partition_reader import KafkaInputPartition, read_partition
    from unaligned.source.planning.offset_ranges import OffsetRange

    options = SourceOptions.parse({"subscribe": topic, "kafka.bootstrap.servers": bootstrap})
    started = time.monotonic()
    rows = 0
    for partition, end in sorted(end_offsets.items()):
        part = KafkaInputPartition(
            0,
            (OffsetRange(TopicPartitionId(topic, partition), 0, end),),
            options.kafka,
            False,
            True,
            options.poll_timeout_ms,
        )
        rows += sum(batch.num_rows for batch in read_partition(part))
    elapsed = time.monotonic() - started
    if rows != RECORDS:
        raise RuntimeError(f"the Python reader read {rows} records, expected {RECORDS}")
    return elapsed


def python_read_in_ranges(
    bootstrap: str, topic: str, end_offsets: dict[int, int]
) -> tuple[float, float]:
    """Seconds to read every partition in ranges of ``RANGE_OFFSETS``, and the records decoded
    per record returned (from each answer's ``records_decoded``)."""
    from unaligned.kafka.partitions import TopicPartitionId
    from unaligned.kafka.records.record_decoder import FetchDecoder, ScannedFetch
    from unaligned.source import partition_reader
    from unaligned.source.options import SourceOptions
    from unaligned.source.planning.offset_ranges import OffsetRange

    decoded = 0
    add = FetchDecoder.add

    def counting(self: FetchDecoder, *args: Any, **kwargs: Any) -> ScannedFetch:
        nonlocal decoded
        result = add(self, *args, **kwargs)
        decoded += result.records_decoded
        return result

    options = SourceOptions.parse({"subscribe": topic, "kafka.bootstrap.servers": bootstrap})
    FetchDecoder.add = counting  # type: ignore[method-assign]
    try:
        started = time.monotonic()
        rows = 0
        for partition, end in sorted(end_offsets.items()):
            tp = TopicPartitionId(topic, partition)
            for start in range(0, end, RANGE_OFFSETS):
                rng = OffsetRange(tp, start, min(end, start + RANGE_OFFSETS))
                part = partition_reader.KafkaInputPartition(
                    0, (rng,), options.kafka, False, True, options.poll_timeout_ms
                )
                rows += sum(b.num_rows for b in partition_reader.read_partition(part))
        elapsed = time.monotonic() - started
    finally:
        FetchDecoder.add = add  # type: ignore[method-assign]
    if rows != RECORDS:
        raise RuntimeError(f"the Python reader read {rows} records, expected {RECORDS}")
    return elapsed, decoded / rows


def spark_read(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path
) -> tuple[float, float, int]:
    """(wall seconds from start() to termination, seconds inside the query's batches, batches)"""
    df = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    started = time.monotonic()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != RECORDS:
        raise RuntimeError(f"the Spark query read {rows} records, expected {RECORDS}")
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
    return elapsed, in_batches, len(query.recentProgress)


def main() -> dict[str, Any]:
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not on PATH: apt-get install kcat")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from unaligned.testing import EmbeddedKafka

    cores = os.cpu_count() or 2
    with (
        tempfile.TemporaryDirectory(prefix="bench-source-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        topic = "bench-source"
        kafka.create_topic(topic, partitions=PARTITIONS)
        produce_s = produce(kafka.bootstrap_servers, topic, uniform_counts(RECORDS))
        end_offsets = kafka.end_offsets(topic)
        print(
            f"produced {RECORDS:,} records x {VALUE_BYTES} B over {PARTITIONS} partitions "
            f"in {produce_s:.1f} s",
            flush=True,
        )

        kcat_s = min(kcat_read(kafka.bootstrap_servers, topic) for _ in range(REPEATS))
        python_s = min(
            python_read(kafka.bootstrap_servers, topic, end_offsets) for _ in range(REPEATS)
        )

        ranged_s, decoded_per_returned = min(
            python_read_in_ranges(kafka.bootstrap_servers, topic, end_offsets)
            for _ in range(REPEATS)
        )

        spark = local_spark("bench-source", cores, log_level="WARN")
        # the first query also starts Spark's Python workers: a warm-up, not counted
        warmup = spark_read(spark, kafka.bootstrap_servers, topic, Path(tmp) / "warmup")
        runs = [
            spark_read(spark, kafka.bootstrap_servers, topic, Path(tmp) / f"cp{i}")
            for i in range(REPEATS)
        ]
        spark.stop()

    wall_s = min(run[0] for run in runs)
    batch_s = min(run[1] for run in runs)
    report = {
        "benchmark": "source",
        "records": RECORDS,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "cpus": cores,
        "spark_master": f"local[{cores}]",
        "python": sys.version.split()[0],
        "unaligned_spark_records_per_s": round(RECORDS / wall_s),
        "unaligned_spark_records_per_s_in_batches": round(RECORDS / batch_s),
        "unaligned_spark_wall_seconds": [round(run[0], 2) for run in runs],
        "unaligned_spark_warmup_wall_seconds": round(warmup[0], 2),
        "unaligned_spark_batches": runs[0][2],
        "unaligned_python_reader_records_per_s": round(RECORDS / python_s),
        "unaligned_python_reader_in_ranges_records_per_s": round(RECORDS / ranged_s),
        "range_offsets": RANGE_OFFSETS,
        "records_decoded_per_record_returned": round(decoded_per_returned, 4),
        "kcat_records_per_s": round(RECORDS / kcat_s),
        "kcat_seconds": round(kcat_s, 2),
        "unaligned_spark_vs_kcat": round(kcat_s / wall_s, 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    rows = [
        (f"format('unaligned') in Spark, AvailableNow -> noop, local[{cores}], wall", wall_s),
        ("  the same, time inside the batch (no query start-up)", batch_s),
        ("unaligned reader in one Python process (no Spark)", python_s),
        (f"  the same in ranges of {RANGE_OFFSETS:,} offsets", ranged_s),
        ("kcat -C", kcat_s),
    ]
    for label, seconds in rows:
        print(f"{label:<72} {round(RECORDS / seconds):>10,} records/s ({seconds:.2f} s)")
    print(f"records decoded per record returned, in those ranges: {decoded_per_returned:.4f}")
    write_results("source", report)
    return report


if __name__ == "__main__":
    main()
