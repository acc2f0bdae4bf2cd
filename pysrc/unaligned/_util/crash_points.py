"""Named crash points of the two-phase-commit sink, armed by an environment variable.

A test arms a point with ``UNALIGNED_CRASH_AT=<point>[@<batchId>]`` (several separated by
commas) in the environment of a process that starts a streaming query. When the sink reaches an
armed point, :func:`reach` kills the *whole query* with ``SIGKILL``: no ``finally`` block, no
``atexit`` hook, no producer close runs, as in a power cut (the OS page cache survives; that is
the one difference from a real power cut, and why the commit log fsyncs on local disks).

Why the whole query: in Spark local mode the Python workers are children of the JVM, which is a
child of the driver Python process. Killing only the Python process that reached the point makes
Spark retry the task (or fail the batch cleanly), which is not a crash. Spark's ``pyspark.daemon``
moves itself and its workers into their own process group (``os.setpgid(0, 0)``), so killing the
current process group is not enough either. What all of them share is the *session*: the test
starts the query runner with ``start_new_session=True`` and exports its session id as
``UNALIGNED_CRASH_SESSION``; a crash kills every process group of that session (found in
``/proc``), its own group last. Without ``UNALIGNED_CRASH_SESSION`` (or if it does not match the
current session) only the current process group is killed, so an armed point can never take down
the terminal session of whoever runs the tests.

Before dying the process appends the point's name to the file named by
``UNALIGNED_CRASH_MARKER`` (if set, fsynced), so a test can prove the crash happened where it
meant it to.

Fail points are softer: :func:`fail_first_attempt` raises :class:`InjectedFailureError` in a task
on its first attempt only, to prove that a task failure Spark retries loses and duplicates
nothing.
"""

from __future__ import annotations

import enum
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from unaligned.errors import InjectedFailureError, OptionError

CRASH_AT_ENV = "UNALIGNED_CRASH_AT"
"""``<point>[@<batchId>][,<point>[@<batchId>]...]``: the points armed in this process tree."""

CRASH_SESSION_ENV = "UNALIGNED_CRASH_SESSION"
"""Session id (``os.getsid``) of the query runner whose whole session a crash kills."""

CRASH_MARKER_ENV = "UNALIGNED_CRASH_MARKER"
"""File a crash appends ``<point>@<batchId>`` to before killing, for the test to check."""


class CrashPoint(str, enum.Enum):
    """Where a query can be killed. The protocol step each belongs to is in its name."""

    TASK_DURING_MERGE = "task_during_merge"
    """Step 3a in a task: carried-forward channel state being merged into new state, not
    pre-committed: the next attempt must replay the inherited refs as the record names them."""
    TASK_AFTER_PRECOMMIT = "task_after_precommit"
    """Step 1 done in a task: its transaction / staging file is prepared, the message not sent."""
    DRIVER_BEFORE_COMMIT_RECORD = "driver_before_commit_record"
    """Step 2, all tasks prepared, no decision yet: everything of the batch must be aborted."""
    DRIVER_AFTER_COMMIT_RECORD = "driver_after_commit_record"
    """Step 2, decision durable, nothing committed yet: everything must be rolled forward."""
    DRIVER_PARTIAL_COMMIT = "driver_partial_commit"
    """Step 2, after the first of several transactions / files of the batch was committed."""
    DRIVER_AFTER_SPARK_LOG = "driver_after_spark_log"
    """Step 2d, file sink: every file renamed and the batch in ``_spark_metadata`` (Spark's
    readers see it), its manifest entry not written (ours do not yet)."""
    DRIVER_AFTER_TABLE_COMMIT = "driver_after_table_commit"
    """Step 2c, Iceberg and Delta sinks: the batch's table commit landed, the sink has not
    marked the batch done (a commit whose answer was lost): the next run must find the batch
    in the table and not commit it again."""
    DRIVER_AFTER_SINK_COMMIT = "driver_after_sink_commit"
    """End of the sink's ``commit()``: done and cleaned up, but Spark has not recorded the batch."""
    DRAIN_HONOURED = "drain_honoured"
    """The source recorded a drain request as honoured; Spark has not logged the offsets with
    the frozen end yet (driver, in ``latestOffset``)."""
    RECOVERY = "recovery"
    """Step 3: after the first of several items of a batch that recovery rolls forward (armed
    as ``recovery@<that batch>``), or at the end of recovery (only when armed without a batch)."""


class FailPoint(str, enum.Enum):
    """Raise-instead-of-kill points (Spark retries the task)."""

    TASK_FIRST_ATTEMPT = "task_fail_first_attempt"
    """After pre-commit, on attempt 0 only: the prepared transaction is left behind, open."""
    TASK_DURING_REPLAY = "task_fail_during_replay"
    """After the first replayed chunk of inherited channel state, on attempt 0 only."""
    TASK_AFTER_CLAIM = "task_fail_after_claim"
    """Kafka sink, attempt 0 only: right after the attempt claimed its transactional id
    (``InitProducerId`` done, nothing written): the next attempt claims one of its own."""
    DESCRIBE_CONFIGS_REFUSED = "describe_configs_refused"
    """Every ``DescribeConfigs`` of a topic's ``max.message.bytes`` (:mod:`unaligned.kafka.produce.
    topic_limits`) is answered as not authorised, as by a broker with ACLs: the sink then
    bounds batches by ``max.request.size`` and splits what the broker refuses."""


@dataclass(frozen=True)
class ArmedPoint:
    """One armed point; ``batch_id`` ``None`` fires at the first batch that reaches it."""

    name: str
    batch_id: int | None

    def matches(self, name: str, batch_id: int | None) -> bool:
        return self.name == name and (self.batch_id is None or self.batch_id == batch_id)


_KNOWN = frozenset(p.value for p in CrashPoint) | frozenset(p.value for p in FailPoint)


def parse_armed(spec: str) -> tuple[ArmedPoint, ...]:
    """Parse ``point[@batchId],...``; unknown names raise :class:`OptionError` naming the var."""
    armed: list[ArmedPoint] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, batch = item.partition("@")
        if name not in _KNOWN:
            raise OptionError(
                f"{CRASH_AT_ENV}: unknown crash point {name!r}; known: {', '.join(sorted(_KNOWN))}"
            )
        if sep and not batch.isdigit():
            raise OptionError(f"{CRASH_AT_ENV}: batch id in {item!r} is not a non-negative integer")
        armed.append(ArmedPoint(name, int(batch) if sep else None))
    return tuple(armed)


def armed_points(environ: Mapping[str, str] = os.environ) -> tuple[ArmedPoint, ...]:
    """The points armed in ``environ`` (read on every call: cheap, and no module state)."""
    spec = environ.get(CRASH_AT_ENV, "")
    return parse_armed(spec) if spec else ()


def is_armed(
    point: CrashPoint | FailPoint,
    batch_id: int | None = None,
    environ: Mapping[str, str] = os.environ,
) -> bool:
    return any(a.matches(point.value, batch_id) for a in armed_points(environ))


def reach(point: CrashPoint, batch_id: int | None = None) -> None:
    """Kill the whole query here if ``point`` is armed for ``batch_id``; otherwise return."""
    if is_armed(point, batch_id):
        _write_marker(f"{point.value}@{batch_id}" if batch_id is not None else point.value)
        kill_query()


def fail_first_attempt(point: FailPoint, batch_id: int, attempt_number: int) -> None:
    """Raise :class:`InjectedFailureError` if ``point`` is armed and this is attempt 0."""
    if attempt_number == 0 and is_armed(point, batch_id):
        _write_marker(f"{point.value}@{batch_id}")
        raise InjectedFailureError(
            f"injected failure {point.value} in batch {batch_id}, attempt {attempt_number}"
        )


def _write_marker(text: str) -> None:
    marker = os.environ.get(CRASH_MARKER_ENV)
    if not marker:
        return
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (text + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def session_process_groups(session_id: int, proc: Path = Path("/proc")) -> set[int]:
    """Process group ids of every live process in ``session_id`` (Linux ``/proc``)."""
    groups: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # "pid (comm) state ppid pgrp session ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 4 and int(fields[3]) == session_id:
            groups.add(int(fields[2]))
    return groups


def kill_session(session_id: int) -> int:
    """SIGKILL every process group of ``session_id`` from outside it (a query runner started
    with ``start_new_session=True``: its JVM and every Python worker die with it, as in a
    power cut). Returns how many groups were signalled."""
    groups = session_process_groups(session_id) | {session_id}
    killed = 0
    for group in sorted(groups):
        try:
            os.killpg(group, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def kill_query() -> NoReturn:
    """SIGKILL every process group of the armed session (own group last); never returns."""
    own_group = os.getpgid(0)
    groups: set[int] = set()
    session = os.environ.get(CRASH_SESSION_ENV, "")
    if session.isdigit() and int(session) == os.getsid(0):
        try:
            groups = session_process_groups(int(session))
        except OSError:
            groups = {int(session)}
        groups.add(int(session))
    for group in sorted(groups - {own_group}):
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os.killpg(own_group, signal.SIGKILL)
    os._exit(137)  # not reached: SIGKILL cannot be caught
