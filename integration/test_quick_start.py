"""The README's Quick start, as a new user runs it: ``unaligned broker`` in one terminal, the
script in another; then Ctrl-C, the broker started again (its data was deleted, its topics are
new), and the same script run a second time. Both runs print the result on a line of its own;
the second must not trip over the first run's checkpoint (a checkpoint that read the old topics
would stop with a DataLossError about re-created topics)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RESULT = "1000 distinct records read back"


def _quick_start(page: Path) -> tuple[list[str], str]:
    """The broker's arguments and the script, as the page shows them."""
    text = page.read_text()
    section = text[text.index("## Quick start") :]
    broker = re.search(r"^unaligned broker (.*?)\s*(#.*)?$", section, flags=re.M)
    script = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert broker is not None and script is not None, f"no Quick start in {page}"
    return broker.group(1).split(), script.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _broker(args: list[str], port: int, env: dict[str, str]) -> Iterator[list[str]]:
    """``unaligned broker ARGS --port PORT`` until it says it is ready; Ctrl-C at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "unaligned.cli", "broker", *args, "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("Kafka is ready: bootstrap servers "):
                break
        assert seen and seen[-1].split()[-1] == f"127.0.0.1:{port}", "".join(seen)
        yield seen
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, rest


def test_the_quick_start_runs_twice_against_a_restarted_broker(tmp_path: Path) -> None:
    broker_args, script = _quick_start(ROOT / "README.md")
    assert _quick_start(ROOT / "docs" / "getting-started.md") == (broker_args, script), (
        "README's Quick start and docs/getting-started.md's differ"
    )
    port = _free_port()
    assert 'servers = "127.0.0.1:9092"' in script
    (tmp_path / "quick_start.py").write_text(
        script.replace('"127.0.0.1:9092"', f'"127.0.0.1:{port}"')
    )
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "TMPDIR": str(tmp_path),  # the script's checkpoints, removed with the test's directory
    }
    for run in (1, 2):
        with _broker(broker_args, port, env):
            proc = subprocess.run(
                [sys.executable, "quick_start.py"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,  # as a terminal shows both
                text=True,
                timeout=300,
            )
        out = proc.stdout
        assert proc.returncode == 0, f"run {run}:\n{out[-4000:]}"
        assert RESULT in out.splitlines(), f"run {run}: no line of its own:\n{out[-2000:]}"
    assert len(list(tmp_path.glob("quick-start-*"))) == 2  # a new checkpoint per run
