"""benchmarks.proc_cpu on this machine's /proc: parsing stat lines and finding Python children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import proc_cpu

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def test_read_stat_counts_this_process_cpu_time() -> None:
    before = proc_cpu.read_stat(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    after = proc_cpu.read_stat(os.getpid())
    assert after is not None
    assert after.ppid == os.getppid()
    assert after.own_s - before.own_s >= 0.2


def test_a_python_child_is_found_and_its_cpu_goes_to_the_parent_once_reaped() -> None:
    reaped_before = proc_cpu.read_stat(os.getpid())
    assert reaped_before is not None
    burn = "import time\nt = time.process_time() + 0.3\nwhile time.process_time() < t: pass\n"
    child = subprocess.Popen(
        [sys.executable, "-c", burn + "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        time.sleep(0.1)
        found = proc_cpu.descendants(proc_cpu.all_stats(), os.getpid())
        assert any(s.pid == child.pid and proc_cpu.is_python(s) for s in found)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    me = proc_cpu.read_stat(os.getpid())
    assert me is not None
    assert me.reaped_children_s - reaped_before.reaped_children_s >= 0.2


def test_the_command_of_a_process_with_parentheses_in_its_name(tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c"
    odd.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(odd), "5"])
    try:
        time.sleep(0.1)
        stat = proc_cpu.read_stat(child.pid)
        assert stat is not None
        assert (stat.comm, stat.ppid) == ("a) b (c", os.getpid())
        assert not proc_cpu.is_python(stat)
    finally:
        child.kill()
        child.wait()


def test_the_spark_jvm_is_the_java_child_that_is_not_the_broker(tmp_path: Path) -> None:
    """Run in a fresh Python process: this test process may hold a broker and a Spark JVM of
    other tests (pytest-xdist runs test files of both directories in one worker)."""
    java = tmp_path / "java"
    java.symlink_to("/bin/sleep")
    script = f"""
import subprocess, time
from benchmarks import proc_cpu

def refused(broker):
    try:
        proc_cpu.spark_jvm_pid(broker)
    except RuntimeError as exc:
        return "expected one Spark JVM" in str(exc)
    return False

assert refused(None)
spark, broker = (subprocess.Popen([{str(java)!r}, "30"]) for _ in range(2))
try:
    time.sleep(0.2)
    assert proc_cpu.spark_jvm_pid(broker.pid) == spark.pid
    assert refused(None)
finally:
    for child in (spark, broker):
        child.kill()
        child.wait()
"""
    benchmarks = Path(proc_cpu.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(benchmarks), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_a_watch_counts_a_python_child_the_kernel_reaped() -> None:
    """PySpark's daemon ignores SIGCHLD, so its workers' time reaches no parent: two samples
    miss a worker that ended between them; the watch keeps its last poll."""
    burn = "import time\nt = time.process_time() + 0.4\nwhile time.process_time() < t: pass\n"
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        before = proc_cpu.sample(os.getpid(), None)
        watch = proc_cpu.CpuWatch(os.getpid(), None, interval_s=0.05)
        with watch:
            child = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(0.3)\n"])
            deadline = time.monotonic() + 30
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # gone from /proc
        missed = proc_cpu.sample(os.getpid(), None).minus(before)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert proc_cpu.read_stat(child.pid) is None
    assert watch.cpu is not None
    assert watch.cpu.python_workers_s >= 0.3
    assert missed.python_workers_s < 0.1
