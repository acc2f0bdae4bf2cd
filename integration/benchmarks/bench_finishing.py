"""How long finishing takes: EndOfData to the query having ended, and a drain under load.

Run: ``python -m benchmarks finishing``. Prints the figures and writes
``integration/benchmarks/results/finishing.json``.

Setup: one :class:`~unaligned.testing.embedded_kafka.EmbeddedKafka` broker, Spark ``local[2]`` in
this process; every query is Kafka -> ``format("unaligned")`` -> exactly-once Kafka sink (each
record to the partition number it was read from), ``trigger(processingTime="1 second")``.

1. ``no_pending``: bounded input (``endingOffsets=latest``), 8 partitions x 1,000 records of
   100 bytes, ``maxOffsetsPerTrigger=2000``; nothing is pending when the input ends.
2. ``pending``: the skewed input of the finishing test (1,200 records of 1,000 bytes in partition
   0, 200 in each of 3 others) on a broker throttled to 200 kB/s per producer, with
   ``alignedCheckpointTimeout=1s``: barriers cut, and channel state is pending when the batch that
   carries EndOfData starts; its final checkpoint replays it all.

   For both, *EndOfData to ended* is the time from the final batch's start (``batchTimestampMs``
   in Spark's offset log, the moment Spark planned the batch that carries EndOfData) to the return
   of ``unaligned.await_finished`` (final checkpoint committed, Spark's commit recorded, query
   stopped); the final barrier's own duration and replayed rows come from the sink's metrics.
3. ``drain``: a producer thread writes about 8,000 records/s of 100 bytes over 8 partitions
   while an unbounded query reads them; after 15 s ``unaligned.stop(query, drain=True)`` is
   called. Reported: the time ``stop`` took (request to query stopped), the batches it took, and
   the records read after the request (frozen end minus the position when it was made).

Every run checks exactly-once by reading the output back (read_committed). Each scenario runs
``REPEATS`` times; figures for one machine at one time, not a regression gate.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results
from unaligned.checkpoint import Checkpoint

PARTITIONS = 8
REPEATS = int(os.environ.get("UNALIGNED_BENCH_REPEATS", "2"))


def _produce(kafka: Any, topic: str, counts: list[int], value_bytes: int) -> int:
    records = [
        (p, f"k{i % 7}".encode(), f"{p}:{i:06d}".encode().ljust(value_bytes, b"x"), None, None)
        for p, count in enumerate(counts)
        for i in range(count)
    ]
    kafka.produce(topic, records)
    return len(records)


def _query(spark: Any, kafka: Any, topic: str, output: str, checkpoint: str, **opts: str) -> Any:
    source_opts = {k: v for k, v in opts.items() if not k.startswith("sink.")}
    reader = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in source_opts.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", checkpoint)
    )
    for key, value in opts.items():
        if key.startswith("sink."):
            writer = writer.option(key[len("sink.") :], value)
    return writer.trigger(processingTime="1 second").start()


def _committed(kafka: Any, output: str) -> int:
    values = [r.value for r in kafka.consume_all(output, read_committed=True)]
    if len(values) != len(set(values)):
        raise AssertionError(f"duplicates in {output}")
    return len(values)


def _finish_run(spark: Any, kafka: Any, tmp: Path, name: str, pending: bool) -> dict[str, Any]:
    import unaligned
    from unaligned.barriers.metrics import read_metrics
    from unaligned.barriers.offset_log import read_offset_log
    from unaligned.finishing import finished_batch

    topic, output = f"{name}-in", f"{name}-out"
    kafka.create_topic(topic, partitions=PARTITIONS)
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = str(tmp / name)
    if pending:
        total = _produce(kafka, topic, [1200, 200, 200, 200], 1000)
        opts = {
            "maxOffsetsPerTrigger": str(total - 40),
            "sink.alignedCheckpointTimeout": "1s",
            "sink.chunkRows": "100",
            "sink.maxUnacknowledgedBytes": "65536",
        }
        kafka.throttle_producers(200_000)
    else:
        total = _produce(kafka, topic, [1000] * PARTITIONS, 100)
        opts = {"maxOffsetsPerTrigger": "2000"}
    try:
        query = _query(spark, kafka, topic, output, checkpoint, endingOffsets="latest", **opts)
        if not unaligned.await_finished(query, checkpoint, timeout_s=600):
            raise TimeoutError(f"{name} did not finish")
        ended_ms = time.time() * 1000
    finally:
        kafka.throttle_producers(None)
    final = finished_batch(Checkpoint.resolve(checkpoint))
    assert final is not None
    started_ms = read_offset_log(Checkpoint.resolve(checkpoint), final).batch_timestamp_ms
    metrics = {m.batch_id: m for m in read_metrics(Checkpoint.resolve(checkpoint))}
    if _committed(kafka, output) != total:
        raise AssertionError(f"{name}: not every record exactly once")
    return {
        "end_of_data_to_ended_s": round((ended_ms - started_ms) / 1000, 2),
        "final_barrier_ms": metrics[final].duration_ms if final in metrics else None,
        "rows_replayed_in_final": metrics[final].rows_replayed if final in metrics else None,
        "barriers_cut": sum(1 for m in metrics.values() if m.mode == "unaligned"),
        "batches": final + 1,
    }


def _drain_run(spark: Any, kafka: Any, tmp: Path, name: str) -> dict[str, Any]:
    import unaligned
    from unaligned.barriers.offset_log import read_offset_log
    from unaligned.finishing import finished_batch

    topic, output = f"{name}-in", f"{name}-out"
    kafka.create_topic(topic, partitions=PARTITIONS)
    kafka.create_topic(output, partitions=PARTITIONS)
    checkpoint = str(tmp / name)
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            _produce_batch(kafka, topic, n)
            n += 50
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        query = _query(spark, kafka, topic, output, checkpoint)
        time.sleep(15)
        before = Checkpoint.resolve(checkpoint).last_logged_batch() or 0
        position = _positions(read_offset_log(Checkpoint.resolve(checkpoint), before))
        asked = time.monotonic()
        unaligned.stop(query, checkpoint, drain=True, timeout_s=600)
        took = time.monotonic() - asked
    finally:
        stop.set()
        producer.join()
    final = finished_batch(Checkpoint.resolve(checkpoint))
    assert final is not None
    frozen = _positions(read_offset_log(Checkpoint.resolve(checkpoint), final))
    if _committed(kafka, output) != sum(frozen.values()):
        raise AssertionError(f"{name}: output differs from the input up to the frozen end")
    return {
        "stop_s": round(took, 2),
        "batches_after_request": final - before,
        "records_after_request": sum(frozen.values()) - sum(position.values()),
    }


def _produce_batch(kafka: Any, topic: str, n: int) -> None:
    kafka.produce(
        topic,
        (
            (p, None, f"{p}:{n + i:08d}".encode().ljust(100, b"x"), None, None)
            for i in range(50)
            for p in range(PARTITIONS)
        ),
    )


def _positions(entry: Any) -> dict[str, int]:
    ours = [s.offset for s in entry.sources if isinstance(s.offset, dict)]
    return {f"{t}-{p}": o for t, per in ours[0]["offsets"].items() for p, o in per.items()}


def _summary(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 2)


def main() -> dict[str, Any]:
    import pyspark

    from unaligned.testing import EmbeddedKafka

    scenarios: dict[str, Callable[[Any, Any, Path, str], dict[str, Any]]] = {
        "no_pending": lambda s, k, t, n: _finish_run(s, k, t, n, pending=False),
        "pending": lambda s, k, t, n: _finish_run(s, k, t, n, pending=True),
        "drain": _drain_run,
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in scenarios}
    with tempfile.TemporaryDirectory(prefix="bench-finishing-") as tmp, EmbeddedKafka() as kafka:
        spark = local_spark("bench-finishing")
        for repeat in range(REPEATS):
            for name, run in scenarios.items():
                result = run(spark, kafka, Path(tmp), f"{name}{repeat}")
                print(f"{name} #{repeat}: {result}", flush=True)
                results[name].append(result)
        spark.stop()
    report = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "pyspark": pyspark.__version__,
        },
        "runs": results,
        "median": {
            "end_of_data_to_ended_s_no_pending": _summary(
                results["no_pending"], "end_of_data_to_ended_s"
            ),
            "end_of_data_to_ended_s_pending": _summary(
                results["pending"], "end_of_data_to_ended_s"
            ),
            "drain_stop_s": _summary(results["drain"], "stop_s"),
        },
    }
    print("\nmedians:", report["median"])
    write_results("finishing", report)
    return report


if __name__ == "__main__":
    main()
