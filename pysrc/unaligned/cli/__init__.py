"""The ``unaligned`` command line (its help text is :data:`DESCRIPTION`, plain text).

``unaligned demo`` is the project's main job (:mod:`unaligned.demo.story`). ``unaligned broker``
runs a local single-node Kafka for trying things (:mod:`unaligned.testing.local_broker`).
``unaligned metrics``, ``inspect``, ``report``, ``abandon`` and ``stop`` work on a query's
checkpoint; ``inspect`` also shows a file sink's output path, and ``remove-orphans`` deletes the
files there that no reader names, for queries the user declares gone. This module parses the
command line; the checkpoint commands run in :mod:`unaligned.cli.checkpoint_commands`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import unaligned
from unaligned.cli import checkpoint_commands as commands
from unaligned.demo.story import run_demo

DESCRIPTION = (
    "Exactly-once Kafka streaming for PySpark with Flink-style unaligned checkpoints: "
    "the demo, a local Kafka broker, and tools that read a query's checkpoint."
)


def _positive_int(raw: str) -> int:
    """argparse type: an integer of at least 1 (argparse names the flag when this fails)."""
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def build_parser() -> tuple[argparse.ArgumentParser, Mapping[str, argparse.ArgumentParser]]:
    """The command's parser and its subcommands' parsers by name (the manual's CLI page is
    rendered from them: ``unaligned.manual.cli_page``)."""
    parser = argparse.ArgumentParser(prog="unaligned", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {unaligned.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run the demo on an embedded Kafka broker (about a minute)",
        description='Kafka -> format("unaligned") -> exactly-once Kafka sink on a throttled '
        "embedded broker: barriers cut, channel state spilled, the query killed hard and "
        "restarted, the bounded input finished, every record read back exactly once.",
    )
    demo.add_argument(
        "--records", type=_positive_int, default=4_000, help="records produced (default: 4000)"
    )
    demo.add_argument(
        "--partitions", type=_positive_int, default=4, help="input partitions (default: 4)"
    )
    demo.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the checkpoint and the HTML report are kept (default: a new directory "
        "under the system's temporary directory, kept after the demo)",
    )
    broker = sub.add_parser(
        "broker",
        help="run a local single-node Kafka broker until Ctrl-C (for trying things)",
        description="Start a single-node Kafka broker (KRaft, transactions enabled) on "
        "127.0.0.1, print its bootstrap address, and run until Ctrl-C or SIGTERM. The first "
        "start builds its launcher with Maven (needs java 17+ and mvn) into a user cache "
        "directory. Its data is deleted when it stops.",
    )
    broker.add_argument(
        "--port",
        type=int,
        default=9092,
        help="the broker's port on 127.0.0.1 (default: 9092; 0: any free port)",
    )
    broker.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME[:PARTITIONS]",
        help="create this topic at start (repeatable; default 1 partition)",
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
        help="show a checkpoint (barriers, in-doubt batches, sources, pending state, "
        "finishing) or a file sink's output (queries, orphaned files)",
        description='Show what a format("unaligned") query\'s checkpoint says: its barriers '
        "(mode, duration, rows written/spilled/replayed, channel state, committed by the sink "
        "and by Spark), in-doubt sink batches, the sources' positions and ends, channel state "
        "pending per task, whether the query finished, and a stop request. Given a file "
        "sink's output path instead: each query's committed batches, and the files no "
        "manifest and no _spark_metadata name (orphans, expired). Reads only.",
    )
    _checkpoint_arguments(inspect)
    inspect.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (keys: docs/reference/inspect-json.md)",
    )
    abandon = sub.add_parser(
        "abandon",
        help="end a decided Kafka sink batch whose held transactions block readers",
        description="End the held transactions of a decided but unfinished batch of a stopped "
        "query's exactly-once Kafka sink: --commit them (what the restart would do), --replay "
        "(abort them; the restart writes the batch again, exactly once while none was "
        "committed) or --skip (abort them and give the batch's records up). Safe to run again.",
    )
    abandon.add_argument("checkpoint", help="the query's checkpointLocation (path or URI)")
    abandon.add_argument("--batch", type=int, required=True, help="the in-doubt batch's id")
    choice = abandon.add_mutually_exclusive_group(required=True)
    for name in ("commit", "replay", "skip"):
        choice.add_argument(f"--{name}", dest="choice", action="store_const", const=name)
    abandon.add_argument(
        "--accept-duplicates",
        action="store_true",
        help="with --replay: go on although some of the batch's transactions were committed",
    )
    _kafka_arguments(abandon, "the sink's Kafka cluster (required)")
    orphans = sub.add_parser(
        "remove-orphans",
        help="delete a file sink's orphaned files and staging of queries that are gone",
        description="Delete, under a file sink's output path, the data files no manifest and "
        "no _spark_metadata name (left by a crash during a commit whose checkpoint was then "
        "deleted) and the staged files, of the queries named. Only for queries that will "
        "never run again from their checkpoint: a crashed query's restart publishes exactly "
        "such files. `unaligned inspect PATH` lists them first.",
    )
    orphans.add_argument("path", help="the file sink's output path (path or URI)")
    chosen = orphans.add_mutually_exclusive_group(required=True)
    chosen.add_argument(
        "--query",
        action="append",
        metavar="QUERY_ID",
        help="a query whose checkpoint is gone (repeatable)",
    )
    chosen.add_argument(
        "--all-queries", action="store_true", help="every query with orphans or staged files"
    )
    orphans.add_argument(
        "--expired",
        action="store_true",
        help="also delete files the retention left out of the manifest and _spark_metadata",
    )
    orphans.add_argument("--dry-run", action="store_true", help="list, delete nothing")
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
    tune = sub.add_parser(
        "tune-spark",
        help="make Spark's Python processes start faster: bytecode into pyspark.zip, and the "
        "preloading daemon's setting printed",
        description="Add bytecode to the Spark installation's pyspark.zip and py4j zip "
        "(idempotent; originals kept as <zip>.orig; --undo puts them back) and print the Spark "
        "setting of the preloading daemon. Run it with the Python of Spark's workers, on every "
        "node that runs them.",
    )
    tune.add_argument("--spark-home", type=Path, help="default: SPARK_HOME or pyspark's directory")
    mode = tune.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report only, change nothing")
    mode.add_argument("--undo", action="store_true", help="put the original zips back")
    return parser, dict(sub.choices)


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.command == "demo":
        if args.workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="unaligned-demo-"))
        else:
            workdir = args.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        return run_demo(args.records, args.partitions, workdir)
    if args.command == "broker":
        from unaligned.testing.local_broker import parse_topic, serve

        try:
            topics = [parse_topic(raw) for raw in args.topic]
        except ValueError as exc:
            parser.error(f"--topic: {exc}")
        return serve(args.port, topics)
    if args.command == "metrics":
        from unaligned.barriers.metrics import metrics_jsonl
        from unaligned.checkpoint import Checkpoint

        sys.stdout.write(metrics_jsonl(Checkpoint.resolve(args.checkpoint)))
        return 0
    if args.command == "stop":
        return commands.stop(args.checkpoint, args.drain, args.timeout)
    if args.command in ("inspect", "report"):
        return commands.inspect(args)
    if args.command == "abandon":
        return commands.abandon(args)
    if args.command == "remove-orphans":
        return commands.remove_orphans(args)
    if args.command == "tune-spark":
        from unaligned.errors import OptionError
        from unaligned.tuning.spark_tuning import run as tune_spark

        try:
            return tune_spark(args.spark_home, check=args.check, revert=args.undo)
        except OptionError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    parser.error(f"unknown command {args.command}")


def _checkpoint_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("checkpoint", help="the query's checkpointLocation (path or URI)")
    _kafka_arguments(command, "also list the sink's open transactions on this Kafka cluster")
    command.add_argument(
        "--transactional-id-prefix",
        help="the sink's transactionalIdPrefix, if the query set one (default: the stem of "
        "the ids in its commit records, else unaligned-<query id>)",
    )


def _kafka_arguments(command: argparse.ArgumentParser, servers_help: str) -> None:
    command.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help=f"{servers_help} (the sink's Kafka options are not stored in the checkpoint)",
    )
    command.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="Kafka client settings for that cluster, as for Kafka's own tools: a properties "
        "file of security.protocol, sasl.*, ssl.* (without the kafka. prefix)",
    )
