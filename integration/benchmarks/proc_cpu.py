"""CPU time of a local Spark session's processes, read from ``/proc`` (Linux only; no psutil).

:func:`sample` adds up, at one moment:

- ``python_workers_s``: user + system time of every Python process below the Spark JVM (the
  ``pyspark.daemon`` and the workers it forks, and the Python processes the JVM starts for a
  Python data source's driver side: planning, offsets, commits), each with the time of its own
  children that have exited and been reaped (``cutime``/``cstime``), plus the JVM's own reaped
  children (Python processes that ended between two samples);
- ``jvm_s``: the Spark JVM's own user + system time (all its threads);
- ``broker_s``: the embedded broker's JVM;
- ``driver_s``: this (the driver's) Python process;
- ``machine_busy_s``: every core's non-idle time (``/proc/stat``), whoever spent it: less the
  four above, what other processes on the machine took meanwhile (noise).

The difference of two samples is what each spent between them, except for Python workers that
exit in between: PySpark's daemon ignores ``SIGCHLD``, so the kernel reaps its workers and their
time reaches no parent. :class:`CpuWatch` therefore also polls every Python process below the
JVM while a query runs and counts each one's time up to its last poll.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    comm: str
    own_s: float  # utime + stime
    reaped_children_s: float  # cutime + cstime


@dataclass(frozen=True)
class CpuSample:
    python_workers_s: float
    python_processes: int
    jvm_s: float
    broker_s: float
    driver_s: float
    machine_busy_s: float

    def ours_s(self) -> float:
        """The Spark session's, the broker's and this process's CPU time."""
        return self.python_workers_s + self.jvm_s + self.broker_s + self.driver_s

    def minus(self, before: CpuSample) -> CpuSample:
        return CpuSample(
            python_workers_s=self.python_workers_s - before.python_workers_s,
            python_processes=self.python_processes,
            jvm_s=self.jvm_s - before.jvm_s,
            broker_s=self.broker_s - before.broker_s,
            driver_s=self.driver_s - before.driver_s,
            machine_busy_s=self.machine_busy_s - before.machine_busy_s,
        )


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat``, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ProcStat(
        pid=pid,
        ppid=int(fields[1]),
        comm=head.partition("(")[2],
        own_s=(utime + stime) / CLOCK_TICKS,
        reaped_children_s=(cutime + cstime) / CLOCK_TICKS,
    )


def all_stats() -> dict[int, ProcStat]:
    stats: dict[int, ProcStat] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := read_stat(int(name))) is not None:
            stats[stat.pid] = stat
    return stats


def descendants(stats: dict[int, ProcStat], root: int) -> list[ProcStat]:
    children: dict[int, list[ProcStat]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def is_python(stat: ProcStat) -> bool:
    if stat.comm.startswith("python"):
        return True
    try:
        with open(f"/proc/{stat.pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0).startswith(b"python")


def machine_busy_s() -> float:
    """Non-idle CPU time of all cores since boot: user, nice, system, irq, softirq, steal."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def spark_jvm_pid(broker_pid: int | None) -> int:
    """The pid of the Spark JVM this process started (``pyspark`` launches it as a ``java``
    child): the ``java`` descendant of this process that is not the broker ``broker_pid``."""
    stats = all_stats()
    found = [
        s.pid for s in descendants(stats, os.getpid()) if s.comm == "java" and s.pid != broker_pid
    ]
    if len(found) != 1:
        raise RuntimeError(f"expected one Spark JVM below this process, found pids {found}")
    return found[0]


def sample(jvm_pid: int, broker_pid: int | None) -> CpuSample:
    stats = all_stats()
    jvm = stats.get(jvm_pid)
    if jvm is None:
        raise RuntimeError(f"no Spark JVM with pid {jvm_pid}")
    workers = [s for s in descendants(stats, jvm_pid) if is_python(s)]
    broker = stats.get(broker_pid) if broker_pid is not None else None
    times = os.times()
    return CpuSample(
        python_workers_s=sum(s.own_s + s.reaped_children_s for s in workers)
        + jvm.reaped_children_s,
        python_processes=len(workers),
        jvm_s=jvm.own_s,
        broker_s=broker.own_s if broker is not None else 0.0,
        driver_s=times.user + times.system,
        machine_busy_s=machine_busy_s(),
    )


class CpuWatch:
    """A :class:`CpuSample` of what was spent inside a ``with`` block, whose
    ``python_workers_s`` is the time each Python process below the JVM spent between the block's
    start (or its own start) and its last poll (every ``interval_s``), so that workers the
    kernel reaped in between still count. ``cpu`` is set when the block ends."""

    def __init__(self, jvm_pid: int, broker_pid: int | None, interval_s: float = 0.1) -> None:
        self._jvm_pid, self._broker_pid, self._interval_s = jvm_pid, broker_pid, interval_s
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_until_stopped, daemon=True)
        self._before: CpuSample | None = None
        self.cpu: CpuSample | None = None

    def _python_times(self) -> dict[int, float]:
        below = descendants(all_stats(), self._jvm_pid)
        return {s.pid: s.own_s for s in below if is_python(s)}

    def _poll_until_stopped(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._last.update(self._python_times())

    def __enter__(self) -> CpuWatch:
        self._before = sample(self._jvm_pid, self._broker_pid)
        self._first = self._python_times()
        self._last = dict(self._first)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._last.update(self._python_times())
        if self._before is None:
            raise RuntimeError("CpuWatch left without being entered")
        spent = sample(self._jvm_pid, self._broker_pid).minus(self._before)
        python_s = sum(t - self._first.get(pid, 0.0) for pid, t in self._last.items())
        self.cpu = replace(spent, python_workers_s=python_s)


@dataclass(frozen=True)
class QueryRun:
    """A query started and run to its end by :func:`timed_query`."""

    query: Any
    wall_s: float
    cpu: CpuSample


def timed_query(writer: Any, jvm_pid: int, broker_pid: int | None) -> QueryRun:
    """``writer.start()`` (a ``DataStreamWriter``), ``awaitTermination()``: the query, its wall
    time from ``start()`` and what it cost (:class:`CpuWatch`)."""
    watch = CpuWatch(jvm_pid, broker_pid)
    with watch:
        started = time.monotonic()
        query = writer.start()
        query.awaitTermination()
        wall_s = time.monotonic() - started
    if watch.cpu is None:
        raise RuntimeError("the CPU watch ended without a sample")
    return QueryRun(query, wall_s, watch.cpu)
