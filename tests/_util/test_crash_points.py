"""Crash points: parsing, matching, and that a crash really kills a whole process session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unaligned._util import crash_points
from unaligned._util.crash_points import CrashPoint, FailPoint, parse_armed
from unaligned.errors import InjectedFailureError, OptionError


def test_parse_armed_points_with_and_without_batch() -> None:
    armed = parse_armed("driver_after_commit_record@3, recovery")
    assert [(a.name, a.batch_id) for a in armed] == [
        ("driver_after_commit_record", 3),
        ("recovery", None),
    ]
    assert armed[0].matches("driver_after_commit_record", 3)
    assert not armed[0].matches("driver_after_commit_record", 2)
    assert armed[1].matches("recovery", None)
    assert armed[1].matches("recovery", 7)


@pytest.mark.parametrize("spec", ["no_such_point", "recovery@x", "recovery@-1"])
def test_parse_rejects_unknown_or_malformed(spec: str) -> None:
    with pytest.raises(OptionError, match="UNALIGNED_CRASH_AT"):
        parse_armed(spec)


def test_every_point_name_is_unique_and_parseable() -> None:
    names = [p.value for p in CrashPoint] + [p.value for p in FailPoint]
    assert len(names) == len(set(names))
    assert [a.name for a in parse_armed(",".join(names))] == names


def test_reach_returns_when_not_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(crash_points.CRASH_AT_ENV, "driver_after_commit_record@5")
    assert not crash_points.is_armed(CrashPoint.DRIVER_AFTER_COMMIT_RECORD, 4)
    assert crash_points.is_armed(CrashPoint.DRIVER_AFTER_COMMIT_RECORD, 5)
    crash_points.reach(CrashPoint.DRIVER_AFTER_COMMIT_RECORD, 4)  # other batch: no crash
    crash_points.reach(CrashPoint.DRIVER_BEFORE_COMMIT_RECORD, 5)  # other point: no crash


def test_fail_first_attempt_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    monkeypatch.setenv(crash_points.CRASH_AT_ENV, "task_fail_first_attempt@2")
    monkeypatch.setenv(crash_points.CRASH_MARKER_ENV, str(marker))
    crash_points.fail_first_attempt(FailPoint.TASK_FIRST_ATTEMPT, 1, 0)
    crash_points.fail_first_attempt(FailPoint.TASK_FIRST_ATTEMPT, 2, 1)
    with pytest.raises(InjectedFailureError, match="batch 2"):
        crash_points.fail_first_attempt(FailPoint.TASK_FIRST_ATTEMPT, 2, 0)
    assert marker.read_text() == "task_fail_first_attempt@2\n"


_CHILD = r"""
import os, subprocess, sys, time
# A grandchild in its OWN process group, like pyspark.daemon's workers.
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import os, time; os.setpgid(0, 0); time.sleep(60)"]
)
with open(sys.argv[1], "w") as fh:
    fh.write(str(grandchild.pid))
time.sleep(0.5)
from unaligned._util import crash_points
crash_points.reach(crash_points.CrashPoint.DRIVER_AFTER_COMMIT_RECORD, 1)
print("not killed")
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
def test_crash_kills_every_process_group_of_the_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    marker = tmp_path / "marker"
    env = dict(os.environ)
    env[crash_points.CRASH_AT_ENV] = "driver_after_commit_record@1"
    env[crash_points.CRASH_MARKER_ENV] = str(marker)
    # The runner exports its own session id; here the child is the session leader.
    launcher = (
        "import os, sys, subprocess; os.environ['UNALIGNED_CRASH_SESSION'] = str(os.getsid(0)); "
        "sys.exit(subprocess.call([sys.executable, '-c', sys.argv[1], sys.argv[2]]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", launcher, _CHILD, str(pid_file)],
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "not killed" not in proc.stdout
    assert marker.read_text() == "driver_after_commit_record@1\n"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "a process in another group of the session survived"


def test_session_process_groups_lists_own_group() -> None:
    groups = crash_points.session_process_groups(os.getsid(0))
    assert os.getpgid(0) in groups
