"""The preloading daemon imports only modules that start no thread, and refuses to fork with
more than one (each case in a fresh interpreter: this test process has threads of its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(code: str, *, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env_path = [] if path is None else [str(path)]
    script = f"import sys; sys.path[:0] = {env_path!r}\n{code}"
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )


def test_preloading_leaves_one_thread_and_imports_pyspark_worker_kafka_and_ours() -> None:
    done = run(
        "from unaligned.tuning.preloading_daemon import preload, os_threads\n"
        "preload()\n"
        "heavy = [m for m in ('numpy', 'pyarrow', 'pandas') if m in sys.modules]\n"
        "print(os_threads(), 'pyspark.worker' in sys.modules, 'kafka.admin' in sys.modules,\n"
        "      'unaligned.kafka.fetch.range_fetch' in sys.modules, heavy)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "1 True True True []"


def test_a_module_that_starts_a_thread_is_refused_before_any_fork(tmp_path: Path) -> None:
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    done = run(
        "from unaligned.tuning.preloading_daemon import preload\npreload(['starts_a_thread'])",
        path=tmp_path,
    )
    assert done.returncode != 0
    assert "left 2 threads" in done.stderr
    assert "spark.python.daemon.module" in done.stderr
