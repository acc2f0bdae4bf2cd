"""The commands of ``unaligned`` that act on a checkpoint or an output path.

``inspect`` and ``report`` (:mod:`unaligned.inspection`), ``remove-orphans`` (a file sink's
output), ``abandon`` (a decided Kafka batch's held transactions,
:mod:`unaligned.sink.topics.kafka_abandon`) and ``stop``; the Kafka client of the commands that ask
the cluster comes from ``--bootstrap-servers`` and ``--command-config``
(:mod:`unaligned.kafka.clients.command_config`). Each returns the command's exit status and
prints what it did; the parser is :func:`unaligned.cli.main`'s.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any


def _kafka_client(args: argparse.Namespace) -> dict[str, Any] | None:
    """The kafka-python kwargs the command line names (``None`` without --bootstrap-servers);
    raises :class:`~unaligned.errors.OptionError` for a bad --command-config."""
    if args.bootstrap_servers is None:
        return None
    from unaligned.kafka.clients.command_config import command_client_kwargs

    return command_client_kwargs(args.bootstrap_servers, args.command_config)


def inspect(args: argparse.Namespace) -> int:
    """``unaligned inspect`` and ``unaligned report``: 0, 2 for a path that is not a checkpoint
    of a ``format("unaligned")`` query (or a bad ``--timeout``), 1 for an unreadable checkpoint
    or an unreachable ``--bootstrap-servers``."""
    from unaligned.checkpoint import Checkpoint
    from unaligned.errors import NotACheckpointError, OptionError, UnalignedError
    from unaligned.inspection import build_view, render_text
    from unaligned.options.parsing import parse_duration_ms

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
            Checkpoint.resolve(args.checkpoint),
            kafka_client=_kafka_client(args),
            transactional_id_prefix=args.transactional_id_prefix,
        )
    except NotACheckpointError as exc:
        if args.command == "inspect":
            from unaligned.sink.files.output_survey import is_file_sink_output

            if is_file_sink_output(args.checkpoint):
                return _inspect_output(args)
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


def _inspect_output(args: argparse.Namespace) -> int:
    """``unaligned inspect`` of a file sink's output path: 0, 1 for an unreadable output."""
    from unaligned.errors import UnalignedError
    from unaligned.inspection.output_text import render_output_text
    from unaligned.sink.files.output_survey import survey_output

    try:
        survey = survey_output(args.checkpoint)
    except UnalignedError as exc:
        print(f"unaligned inspect: {exc}", file=sys.stderr)
        return 1
    if args.json:
        import json

        sys.stdout.write(json.dumps(survey.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_output_text(survey))
    return 0


def remove_orphans(args: argparse.Namespace) -> int:
    """``unaligned remove-orphans``: 0, 2 for a path that is not a file sink's output, 1 for an
    unreadable one."""
    from unaligned.errors import UnalignedError
    from unaligned.sink.files.output_survey import is_file_sink_output, remove_orphans

    if not is_file_sink_output(args.path):
        print(
            f"unaligned remove-orphans: {args.path} is not a file sink's output (no "
            "_unaligned_manifest, _unaligned_staging or _spark_metadata in it)",
            file=sys.stderr,
        )
        return 2
    queries = None if args.all_queries else set(args.query)
    try:
        removed = remove_orphans(args.path, queries, expired=args.expired, dry_run=args.dry_run)
    except UnalignedError as exc:
        print(f"unaligned remove-orphans: {exc}", file=sys.stderr)
        return 1
    verb = "would remove" if args.dry_run else "removed"
    for name in removed:
        print(f"{verb} {name}")
    print(f"{verb} {len(removed)} file(s) or directories")
    return 0


def abandon(args: argparse.Namespace) -> int:
    """``unaligned abandon``: 0 once the batch is ended, 2 for bad arguments or a running
    query, 1 when the batch cannot be ended as asked (nothing changed) or Kafka failed."""
    from unaligned.checkpoint import Checkpoint
    from unaligned.errors import AbandonError, OptionError, UnalignedError
    from unaligned.finishing.heartbeat import INTERVAL_S, STALE_S, beating
    from unaligned.sink.commit_log import CommitLog
    from unaligned.sink.topics.kafka_abandon import Choice, abandon

    name = "unaligned abandon"
    checkpoint = Checkpoint.resolve(args.checkpoint)
    try:
        client = _kafka_client(args)
    except OptionError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    if client is None:
        print(f"{name}: --bootstrap-servers is required", file=sys.stderr)
        return 2
    # a query that has just stopped leaves a heartbeat that is fresh for STALE_S more
    deadline = time.monotonic() + STALE_S + INTERVAL_S
    while beating(checkpoint):
        if time.monotonic() > deadline:
            print(
                f"{name}: the query of {args.checkpoint} is running (its source's heartbeat "
                "is fresh): stop it first ('unaligned stop')",
                file=sys.stderr,
            )
            return 2
        time.sleep(INTERVAL_S / 4)
    choice = Choice(args.choice)
    try:
        items = abandon(
            CommitLog(checkpoint),
            args.batch,
            choice,
            client,
            accept_duplicates=args.accept_duplicates,
        )
    except AbandonError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except UnalignedError as exc:
        print(f"{name}: {exc}; run it again once Kafka answers", file=sys.stderr)
        return 1
    for item in items:
        print(f"found {item.describe()}")
    done = {
        Choice.COMMIT: "committed; the batch is done",
        Choice.REPLAY: "aborted; commit record withdrawn: the restart writes the batch again",
        Choice.SKIP: "aborted; the batch is done as abandoned: its records are given up",
    }
    print(f"batch {args.batch}: {done[choice]}")
    return 0


def stop(location: str, drain: bool, timeout_s: float) -> int:
    """``unaligned stop``: 0 once the stop completed, 2 for a path that is not a checkpoint of
    a ``format("unaligned")`` query, 3 when it did not complete in time, 4 when the query is
    not running or ended before the stop completed."""
    from unaligned.checkpoint import Checkpoint
    from unaligned.errors import NotACheckpointError, QueryNotRunningError, StopTimeoutError
    from unaligned.finishing.final_checkpoint import finished_batch
    from unaligned.finishing.waiting import stop_from_elsewhere

    checkpoint = Checkpoint.resolve(location)
    try:
        stop_from_elsewhere(checkpoint, drain, timeout_s, lambda line: print(line, flush=True))
    except NotACheckpointError as exc:
        print(f"unaligned stop: {exc}", file=sys.stderr)
        return 2
    except StopTimeoutError as exc:
        print(f"unaligned stop: {exc}", file=sys.stderr)
        return 3
    except QueryNotRunningError as exc:
        print(f"unaligned stop: {exc}", file=sys.stderr)
        return 4
    if drain:
        print(f"drained: final checkpoint {finished_batch(checkpoint)} committed; nothing is open")
    else:
        print(f"stopped after batch {checkpoint.last_logged_batch()}; nothing is open")
    return 0
