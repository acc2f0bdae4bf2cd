"""benchmarks.proc_cpu on this machine's /proc: parsing stat lines and finding Python children."""

from __future__ import annotations

import os
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
    java = tmp_path / "java"
    java.symlink_to("/bin/sleep")
    with pytest.raises(RuntimeError, match="expected one Spark JVM"):
        proc_cpu.spark_jvm_pid(None)
    spark, broker = (subprocess.Popen([str(java), "30"]) for _ in range(2))
    try:
        time.sleep(0.2)
        assert proc_cpu.spark_jvm_pid(broker.pid) == spark.pid
        with pytest.raises(RuntimeError, match="expected one Spark JVM"):
            proc_cpu.spark_jvm_pid(None)
    finally:
        for child in (spark, broker):
            child.kill()
            child.wait()
