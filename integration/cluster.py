"""Real-cluster helpers for the fault tests: Spark homes, executor JVMs, kills, stage retries.

Everything binds to loopback addresses only.

Spark homes
    pip-installed pyspark carries a usable Spark home (``bin/``, ``jars/``) in its package
    directory, and ``local-cluster[n,c,m]`` (executors in their own JVMs, launched by in-process
    standalone workers) runs from it once ``SPARK_HOME`` points there. The workers then create
    their work directories (``work/<app-id>/<executor-id>/stderr``: every executor's log) under
    ``$SPARK_HOME``, i.e. inside site-packages. :func:`spark_home` builds a private Spark home
    instead: a directory of symlinks to the package's entries, so ``work/`` lands there.

Executors
    :func:`executors` scans ``/proc`` for ``CoarseGrainedExecutorBackend`` JVMs, filtered by the
    runner's session id (``local-cluster``: the executors are children of the driver JVM, so
    they stay in the runner's session) or by application id (any master).
    :func:`kill_executor` SIGKILLs one executor JVM and every process below it (its
    ``pyspark.daemon`` and Python workers, which leave the JVM's process group).
    :func:`executor_of` maps a Python worker pid (from a task marker) to its executor.

Standalone cluster
    Spark never launches a speculative copy on a host where the task already has an attempt
    (``TaskSetManager.dequeueTaskFromList``: ``!(speculative && hasAttemptOnHost(index, host))``),
    and every ``local-cluster`` executor reports the same host. :class:`StandaloneCluster` starts
    a master on ``127.0.0.1`` and one worker per loopback address ``127.0.0.2``,
    ``127.0.0.3``, ..., so executors sit on distinct "hosts" and speculation can run.

Stage retries
    :func:`stage_attempts` and :func:`task_starts` parse the driver's scheduler log (the runner
    writes it with ``driver_log``) to prove a fetch failure really made Spark resubmit the stage
    and what attempt numbers its tasks got.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

# --- Spark homes ---------------------------------------------------------------------------------


def pyspark_home() -> Path:
    """The pip-installed pyspark package directory (a usable ``SPARK_HOME``)."""
    import pyspark

    return Path(os.path.dirname(pyspark.__file__))


def spark_home(root: Path) -> Path:
    """A Spark home at ``root``: symlinks to every entry of the pyspark package directory except
    ``work`` (the standalone workers' directory, created fresh under ``root``)."""
    source = pyspark_home()
    root.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name in ("work", "__pycache__"):
            continue
        link = root / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)
    return root


def loopback_env(env: dict[str, str]) -> dict[str, str]:
    """Bind Spark to loopback (else it picks the first non-loopback interface)."""
    env["SPARK_LOCAL_IP"] = env.get("SPARK_LOCAL_IP", "127.0.0.1")
    env["SPARK_LOCAL_HOSTNAME"] = env.get("SPARK_LOCAL_HOSTNAME", env["SPARK_LOCAL_IP"])
    return env


# --- processes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Executor:
    pid: int
    executor_id: str
    app_id: str
    host: str
    session: int


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session id) of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[3])


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _arg(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1] if flag in cmd and cmd.index(flag) + 1 < len(cmd) else ""


def executors(*, session: int | None = None, app_id: str | None = None) -> list[Executor]:
    """Live executor JVMs of one application, sorted by executor id (numerically).

    ``session``: the runner's session id (``local-cluster``: executors descend from the driver
    JVM and keep its session); ``app_id``: Spark's application id (any master)."""
    found = []
    for pid in _pids():
        cmd = _cmdline(pid)
        if EXECUTOR_CLASS not in cmd:
            continue
        stat = _stat(pid)
        if stat is None or stat[0] == "Z":
            continue
        executor = Executor(
            pid=pid,
            executor_id=_arg(cmd, "--executor-id"),
            app_id=_arg(cmd, "--app-id"),
            host=_arg(cmd, "--hostname"),
            session=stat[2],
        )
        if session is not None and executor.session != session:
            continue
        if app_id is not None and executor.app_id != app_id:
            continue
        found.append(executor)
    return sorted(found, key=lambda e: int(e.executor_id) if e.executor_id.isdigit() else -1)


def wait_for_executors(
    count: int,
    *,
    session: int | None = None,
    app_id: str | None = None,
    timeout_s: float = 60.0,
) -> list[Executor]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = executors(session=session, app_id=app_id)
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(found)} executor JVM(s) after {timeout_s} s, wanted {count}"
            )
        time.sleep(0.2)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, then theirs)."""
    children: dict[int, list[int]] = {}
    for candidate in _pids():
        stat = _stat(candidate)
        if stat is not None:
            children.setdefault(stat[1], []).append(candidate)
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, []))
    return out


def ancestors(pid: int) -> list[int]:
    out = []
    stat = _stat(pid)
    while stat is not None and stat[1] > 1:
        out.append(stat[1])
        stat = _stat(stat[1])
    return out


def executor_of(pid: int, candidates: Iterable[Executor]) -> Executor | None:
    """The executor a Python worker ``pid`` runs under (worker -> daemon -> executor JVM)."""
    chain = set(ancestors(pid))
    for executor in candidates:
        if executor.pid in chain:
            return executor
    return None


def kill_executor(executor: Executor) -> list[int]:
    """SIGKILL the executor JVM and every process below it; return the pids signalled.

    The Python processes are collected before the JVM dies (they would be re-parented) and
    signalled right after it, so none of them can finish a write in between."""
    below = descendants(executor.pid)
    os.kill(executor.pid, signal.SIGKILL)
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [executor.pid, *below]


def wait_gone(pids: Iterable[int], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    pending = [p for p in pids if alive(p)]
    while pending:
        if time.monotonic() > deadline:
            raise AssertionError(f"still alive after SIGKILL: {pending}")
        time.sleep(0.05)
        pending = [p for p in pending if alive(p)]


# --- a standalone cluster with one loopback "host" per worker ------------------------------------


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class StandaloneCluster:
    """A Spark standalone master on 127.0.0.1 and ``workers`` workers on 127.0.0.2, 127.0.0.3...

    Use as a context manager; ``master_url`` is what the runner's ``master`` key takes. Workers
    keep their executors' logs under ``<root>/work-<n>/<app-id>/<executor-id>/stderr``."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master_url = ""
        self._procs: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = str(spark_home(self.root / "spark-home"))
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["SPARK_DAEMON_JAVA_OPTS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        env["SPARK_DAEMON_MEMORY"] = "256m"
        env["SPARK_NO_DAEMONIZE"] = "1"
        return env

    def _start(self, name: str, args: list[str], env: dict[str, str], host: str) -> Path:
        log = self.root / f"{name}.log"
        proc_env = dict(env, SPARK_LOCAL_IP=host, SPARK_LOCAL_HOSTNAME=host)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [os.path.join(env["SPARK_HOME"], "bin", "spark-class"), *args],
                env=proc_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        return log

    def __enter__(self) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        env = self._env()
        port = _free_port("127.0.0.1")
        self.master_url = f"spark://127.0.0.1:{port}"
        master_log = self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                "0",
            ],
            env,
            "127.0.0.1",
        )
        worker_logs = []
        for n in range(self.workers):
            host = f"127.0.0.{n + 2}"
            worker_logs.append(
                self._start(
                    f"worker-{n}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        host,
                        "--port",
                        "0",
                        "--webui-port",
                        "0",
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--work-dir",
                        str(self.root / f"work-{n}"),
                        self.master_url,
                    ],
                    env,
                    host,
                )
            )
        try:
            deadline = time.monotonic() + 90
            while (
                sum(
                    "Successfully registered with master" in log.read_text(errors="replace")
                    for log in worker_logs
                )
                < self.workers
            ):
                dead = [p.args for p in self._procs if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"standalone cluster did not come up (exited: {dead}); master log:\n"
                        + master_log.read_text(errors="replace")[-3000:]
                    )
                time.sleep(0.2)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                # Only the processes started here (each in its own session), by pid.
                for pid in descendants(proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.kill()
            proc.wait(timeout=30)
        self._procs = []


# --- the driver's scheduler log -------------------------------------------------------------------

# Spark 4: "Starting task <index>.<attempt> in stage <stage>.<stageAttempt> (TID <tid>)
# (<host>,executor <id>, partition <partition>, <locality>, <n> bytes)"; <index> is the task's
# index in its task set (not the partition: a resubmitted stage numbers its tasks from 0 again).
_STARTING = re.compile(
    r"Starting task (?P<index>\d+)\.(?P<attempt>\d+) in stage "
    r"(?P<stage>\d+)\.(?P<stage_attempt>\d+) \(TID (?P<tid>\d+)\)"
    r"(?: \((?P<host>[^,]*),\s*executor (?P<executor>[^,]+), partition (?P<partition>\d+))?"
)
# "Marking task <index> in stage <stage>.<stageAttempt> (on <host>) as speculatable because ..."
_SPECULATABLE = re.compile(
    r"Marking task (?P<index>\d+) in stage (?P<stage>\d+)\.(?P<stage_attempt>\d+) .*speculatable"
)
_FETCH_FAILED = re.compile(r"FetchFailed|MetadataFetchFailed|fetch failure", re.IGNORECASE)


_ENDED = re.compile(
    r"(?P<how>Finished|Lost) task (?P<index>\d+)\.(?P<attempt>\d+) in stage "
    r"(?P<stage>\d+)\.(?P<stage_attempt>\d+) \(TID (?P<tid>\d+)\)"
)
_CLOCK = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d\d\d) ")


def _clock(line: str) -> float:
    """Seconds since midnight of a ``HH:MM:SS.mmm`` log line (the runner's layout), or -1."""
    match = _CLOCK.match(line)
    if not match:
        return -1.0
    h, m, sec, ms = (int(g) for g in match.groups())
    return h * 3600 + m * 60 + sec + ms / 1000


@dataclass(frozen=True)
class TaskSpan:
    """One task attempt from its start to its end line (``end`` -1: no end logged)."""

    tid: int
    stage: int
    stage_attempt: int
    partition: int
    attempt: int
    start: float
    end: float
    outcome: str  # "Finished", "Lost" or "" (no end logged)


def task_spans(log_text: str) -> list[TaskSpan]:
    """Every task attempt of the driver log with its start and end times."""
    starts: dict[int, tuple[TaskStart, float]] = {}
    ends: dict[int, tuple[str, float]] = {}
    lines = log_text.splitlines()
    by_tid = {s.tid: s for s in task_starts(log_text)}
    for line in lines:
        started = _STARTING.search(line)
        if started and int(started["tid"]) in by_tid:
            starts[int(started["tid"])] = (by_tid[int(started["tid"])], _clock(line))
            continue
        ended = _ENDED.search(line)
        if ended:
            ends[int(ended["tid"])] = (ended["how"], _clock(line))
    out = []
    for tid, (start, at) in sorted(starts.items()):
        how, end = ends.get(tid, ("", -1.0))
        out.append(
            TaskSpan(
                tid, start.stage, start.stage_attempt, start.partition, start.attempt, at, end, how
            )
        )
    return out


@dataclass(frozen=True)
class TaskStart:
    stage: int
    stage_attempt: int
    index: int
    attempt: int
    tid: int
    executor: str
    partition: int
    speculative: bool


def task_starts(log_text: str) -> list[TaskStart]:
    """Every ``Starting task i.a in stage s.t (TID n) (...)`` line of the driver log.

    Spark 4 does not say "speculative" there: a start is marked speculative when the task was
    marked speculatable before it and it is not the first attempt."""
    out = []
    speculatable: set[tuple[int, int, int]] = set()
    for line in log_text.splitlines():
        marked = _SPECULATABLE.search(line)
        if marked:
            speculatable.add(
                (int(marked["stage"]), int(marked["stage_attempt"]), int(marked["index"]))
            )
            continue
        match = _STARTING.search(line)
        if match:
            out.append(
                TaskStart(
                    stage=int(match["stage"]),
                    stage_attempt=int(match["stage_attempt"]),
                    index=int(match["index"]),
                    attempt=int(match["attempt"]),
                    tid=int(match["tid"]),
                    executor=match["executor"] or "",
                    partition=int(match["partition"]) if match["partition"] else -1,
                    speculative=int(match["attempt"]) > 0
                    and (int(match["stage"]), int(match["stage_attempt"]), int(match["index"]))
                    in speculatable,
                )
            )
    return out


def stage_attempts(log_text: str) -> dict[int, set[int]]:
    """Stage id -> the stage attempts that started tasks."""
    out: dict[int, set[int]] = {}
    for start in task_starts(log_text):
        out.setdefault(start.stage, set()).add(start.stage_attempt)
    return out


def fetch_failure_lines(log_text: str) -> list[str]:
    return [line for line in log_text.splitlines() if _FETCH_FAILED.search(line)]
