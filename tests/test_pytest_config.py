"""pyproject's pytest settings: an exception in a test's background thread fails the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

A_THREAD_THAT_RAISES = """
import threading


def test_a_background_step_that_fails() -> None:
    thread = threading.Thread(target=lambda: 1 / 0)
    thread.start()
    thread.join()
"""


def test_an_exception_in_a_background_thread_fails_the_test(tmp_path: Path) -> None:
    test_file = tmp_path / "test_thread.py"
    test_file.write_text(A_THREAD_THAT_RAISES)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")]
        + ["--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-q", str(test_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout
    assert "ZeroDivisionError" in run.stdout
