"""The main command of a checkout, ``unaligned demo``, end to end: it cuts barriers, kills its query
hard with channel state pending, restarts it, finishes with the final checkpoint, and finds every
record exactly once with nothing open."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_demo_tells_the_whole_story_and_finds_exactly_once(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-m", "unaligned.cli", "demo", "--workdir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"{out[-3000:]}\n{proc.stderr[-3000:]}"
    assert "killed the query hard" in out and "rows of channel state pending" in out
    summary = dict(
        (line[:25].strip(), line[25:].strip()) for line in out.splitlines() if "  " in line[:26]
    )
    assert summary["duplicates"] == "0" and summary["missing"] == "0"
    assert summary["open transactions"] == "0"
    assert summary["records read back"].startswith("4000 ")
    assert not summary["barriers"].endswith(" 0 unaligned")
    assert int(summary["rows replayed"]) > 0
    report = Path(summary["HTML report"])
    assert report.is_file() and "<svg" in report.read_text()
    assert "exactly once: yes" in out
    # no client outlives the broker noisily: kafka-python logs nothing at ERROR
    assert "ERROR kafka" not in proc.stderr, proc.stderr[-3000:]
