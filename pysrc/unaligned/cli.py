"""The ``unaligned`` command line.

``unaligned demo`` is the project's main job: it starts the embedded single-node Kafka broker
(no outside Kafka needed), produces a sample data set to a multi-partition topic, runs a
streaming query ``format("unaligned")`` -> ``format("unaligned")`` (the exactly-once sink, to a
Kafka topic and to Parquet files), and prints what was read and written per partition, checking
that every record arrived exactly once.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from unaligned.testing.topic_records import ProduceRecord


class _Producer(Protocol):
    """What the demo needs of a broker: ``EmbeddedKafka.produce`` (a recorder in the tests)."""

    def produce(self, topic: str, records: Iterable[ProduceRecord]) -> None: ...


def _spark_session(app_name: str) -> SparkSession:
    """A local Spark session whose Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _produce_sample(broker: _Producer, topic: str, partitions: int, records: int) -> Counter[int]:
    """Produce ``records`` keyed records round-robin over ``partitions``; count per partition."""
    per_partition: Counter[int] = Counter()
    now_ms = int(time.time() * 1000)

    def rows() -> Iterator[ProduceRecord]:
        for i in range(records):
            partition = i % partitions
            per_partition[partition] += 1
            yield (
                partition,
                f"sensor-{i % 17}".encode(),
                f'{{"seq": {i}, "reading": {i * 0.5:.1f}}}'.encode(),
                [("source", b"demo")],
                now_ms + i,
            )

    broker.produce(topic, rows())
    return per_partition


def run_demo(records: int, partitions: int, workdir: Path) -> int:
    """Run the demo; return 0 when every record arrived exactly once in both sinks."""
    from unaligned.testing import EmbeddedKafka

    print(f"starting the embedded Kafka broker (data under {workdir})", flush=True)
    with EmbeddedKafka(data_dir=workdir / "kafka") as broker:
        source_topic, output_topic = "demo-input", "demo-output"
        broker.create_topic(source_topic, partitions=partitions)
        broker.create_topic(output_topic, partitions=partitions)
        produced = _produce_sample(broker, source_topic, partitions, records)
        print(f"produced {records} records to {source_topic!r} over {partitions} partitions")

        spark = _spark_session("unaligned-demo")
        try:
            stream = (
                spark.readStream.format("unaligned")
                .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                .option("subscribe", source_topic)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", max(1, records // 4))
                .load()
            )
            to_kafka = (
                stream.selectExpr("key", "value", "partition")
                .writeStream.format("unaligned")
                .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                .option("topic", output_topic)
                .option("checkpointLocation", str(workdir / "checkpoint-kafka"))
                .trigger(availableNow=True)
                .start()
            )
            to_files = (
                stream.writeStream.format("unaligned")
                .option("path", str(workdir / "files"))
                .option("checkpointLocation", str(workdir / "checkpoint-files"))
                .trigger(availableNow=True)
                .start()
            )
            to_kafka.awaitTermination()
            to_files.awaitTermination()
            batches = len(to_kafka.recentProgress)
        finally:
            spark.stop()

        from unaligned import read_committed_files

        files = read_committed_files(str(workdir / "files"))
        file_counts = Counter(files.column("partition").to_pylist())
        kafka_counts = Counter(r.partition for r in broker.consume_all(output_topic))
        print(
            f"\n{'partition':>9} {'produced':>9} {'to kafka':>9} {'to files':>9}   "
            f"({batches} batches)"
        )
        for p in range(partitions):
            print(f"{p:>9} {produced[p]:>9} {kafka_counts[p]:>9} {file_counts[p]:>9}")
        from unaligned.barriers.metrics import read_metrics

        print(
            "\nKafka sink barriers "
            "(batch: mode, duration from batch start, rows written/spilled/replayed)"
        )
        for m in read_metrics(str(workdir / "checkpoint-kafka")):
            print(
                f"  {m.batch_id}: {m.mode}, {m.duration_ms} ms, "
                f"{m.rows_written}/{m.rows_spilled}/{m.rows_replayed}"
            )
        exact = produced == kafka_counts == file_counts
        distinct = len(set(files.column("value").to_pylist())) == records
        ok = exact and distinct
        print("\nexactly once: " + ("yes" if ok else "NO"))
        return 0 if ok else 1


def _positive_int(raw: str) -> int:
    """argparse type: an integer of at least 1 (argparse names the flag when this fails)."""
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unaligned", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the demo on the embedded Kafka broker")
    demo.add_argument("--records", type=_positive_int, default=20_000)
    demo.add_argument("--partitions", type=_positive_int, default=4)
    demo.add_argument(
        "--workdir", type=Path, default=None, help="keep files here (default: a temp dir)"
    )
    metrics = sub.add_parser(
        "metrics", help="print a checkpoint's barrier metrics as JSON lines, oldest first"
    )
    metrics.add_argument("checkpoint", help="the query's checkpointLocation (path or URI)")
    stop = sub.add_parser(
        "stop",
        help="stop a running query at its next barrier (a request under its checkpoint)",
        description="Record a stop request under the checkpoint and wait until the query "
        "honoured it: with --drain it reads up to the latest offsets of now and ends with its "
        "final checkpoint; without, no batch runs after the current one. A query that waits in "
        "unaligned.await_finished() then stops; any other stays idle until stopped.",
    )
    stop.add_argument("checkpoint", help="the query's checkpointLocation (path or URI)")
    stop.add_argument("--drain", action="store_true", help="finish all input up to now first")
    stop.add_argument("--timeout", type=float, default=600.0, help="seconds to wait (default: 600)")
    inspect = sub.add_parser(
        "inspect",
        help="show a checkpoint: barriers, in-doubt batches, sources, pending state, finishing",
        description='Show what a format("unaligned") query\'s checkpoint says: its barriers '
        "(mode, duration, rows written/spilled/replayed, channel state, committed by the sink "
        "and by Spark), in-doubt sink batches, the sources' positions and ends, channel state "
        "pending per task, whether the query finished, and a stop request. Reads only.",
    )
    _checkpoint_arguments(inspect)
    inspect.add_argument(
        "--json", action="store_true", help="print one JSON document (keys documented in README)"
    )
    report = sub.add_parser(
        "report",
        help="write a self-contained HTML page: barrier timeline charts and the inspect summary",
    )
    _checkpoint_arguments(report)
    report.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    report.add_argument(
        "--timeout",
        default="30s",
        help="the sink's alignedCheckpointTimeout, drawn on the duration chart (not stored in "
        "the checkpoint; default: 30s)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.command == "demo":
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            return run_demo(args.records, args.partitions, args.workdir)
        with tempfile.TemporaryDirectory(prefix="unaligned-demo-") as tmp:
            return run_demo(args.records, args.partitions, Path(tmp))
    if args.command == "metrics":
        from unaligned.barriers.metrics import metrics_jsonl

        sys.stdout.write(metrics_jsonl(args.checkpoint))
        return 0
    if args.command == "stop":
        return _stop(args.checkpoint, args.drain, args.timeout)
    if args.command in ("inspect", "report"):
        return _inspect(args)
    parser.error(f"unknown command {args.command}")


def _checkpoint_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("checkpoint", help="the query's checkpointLocation (path or URI)")
    command.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="also list the sink's open transactions on this Kafka cluster (the sink's Kafka "
        "options are not stored in the checkpoint)",
    )
    command.add_argument(
        "--transactional-id-prefix",
        help="the sink's transactionalIdPrefix, if the query set one (default: the prefix of "
        "the ids in its commit records, else unaligned-<query id>)",
    )


def _inspect(args: argparse.Namespace) -> int:
    """``unaligned inspect`` and ``unaligned report``: 0, 2 for a path that is not a checkpoint
    of a ``format("unaligned")`` query (or a bad ``--timeout``), 1 for an unreadable checkpoint
    or an unreachable ``--bootstrap-servers``."""
    from unaligned._parsing import parse_duration_ms
    from unaligned.errors import NotACheckpointError, OptionError, UnalignedError
    from unaligned.inspection import build_view, render_text

    name = f"unaligned {args.command}"
    try:
        timeout_ms = parse_duration_ms("--timeout", args.timeout) if args.command == "report" else 0
    except OptionError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    # kafka-python logs every failed connection; an unreachable cluster is reported once below
    kafka_logger = logging.getLogger("kafka")
    kafka_level = kafka_logger.level
    kafka_logger.setLevel(logging.CRITICAL)
    try:
        view = build_view(
            args.checkpoint,
            bootstrap_servers=args.bootstrap_servers,
            transactional_id_prefix=args.transactional_id_prefix,
        )
    except NotACheckpointError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except UnalignedError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    finally:
        kafka_logger.setLevel(kafka_level)
    if args.command == "inspect":
        if args.json:
            import json

            sys.stdout.write(json.dumps(view.to_dict(), indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(render_text(view))
        return 0
    from unaligned.inspection.html_report import render_html

    args.output.write_text(render_html(view, timeout_ms), encoding="utf-8")
    print(f"wrote {args.output} ({len(view.barriers)} barriers)")
    return 0


def _stop(checkpoint: str, drain: bool, timeout_s: float) -> int:
    """``unaligned stop``: 0 once the stop completed, 2 for a path that is not a checkpoint of
    a ``format("unaligned")`` query, 3 when it did not complete in time."""
    from unaligned.errors import NotACheckpointError, StopTimeoutError
    from unaligned.finishing.final_checkpoint import finished_batch, last_logged_batch
    from unaligned.finishing.stop_request import request_stop
    from unaligned.finishing.waiting import barrier_token, wait_for_stop

    try:
        barrier_token(checkpoint)
    except NotACheckpointError as exc:
        print(f"unaligned stop: {exc}", file=sys.stderr)
        return 2
    request = request_stop(checkpoint, drain)
    print(f"stop requested (drain={drain}); waiting for the query's next barrier", flush=True)
    try:
        wait_for_stop(checkpoint, request, timeout_s)
    except StopTimeoutError as exc:
        print(f"unaligned stop: {exc}", file=sys.stderr)
        return 3
    if drain:
        print(f"drained: final checkpoint {finished_batch(checkpoint)} committed; nothing is open")
    else:
        print(f"stopped after batch {last_logged_batch(checkpoint)}; nothing is open")
    return 0


if __name__ == "__main__":
    sys.exit(main())
