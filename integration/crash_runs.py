"""Running ``query_runner.py`` in a session of its own, with a crash point armed or not, and
the crash tests' standard input (4 partitions of 200 records) with its exactly-once checks.

Shared by the crash tests (:mod:`test_sink_crash_matrix`, :mod:`test_finishing_crashes`): a run
that reaches an armed point dies by SIGKILL together with its JVM and Python workers
(:mod:`unaligned._util.crash_points`); :func:`crash` proves it died where it was meant to, and
:func:`finish` that a run (a restart) ended cleanly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import assert_no_stray_files, committed_values, wait_until
from unaligned._util import crash_points
from unaligned.checkpoint import Checkpoint
from unaligned.kafka.transactions import transaction_states
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix
from unaligned.testing import EmbeddedKafka

RUNNER = Path(__file__).with_name("query_runner.py")
RUN_TIMEOUT_S = 300
PARTITIONS = 4
PER_PARTITION = 200

TopicFactory = Callable[..., str]


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    marker: list[str]

    def summary(self) -> dict[str, Any]:
        """The runner's last stdout line: its JSON summary."""
        result: dict[str, Any] = json.loads(self.stdout.strip().splitlines()[-1])
        return result


def run_query(config: dict[str, Any], tmp_path: Path, crash_at: str | None) -> Run:
    """Run the query of ``config`` to its end (or its crash) in a new session."""
    marker = tmp_path / f"marker-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNALIGNED_CRASH")}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env[crash_points.CRASH_MARKER_ENV] = str(marker)
    if crash_at is not None:
        env[crash_points.CRASH_AT_ENV] = crash_at
    proc = subprocess.run(
        [sys.executable, str(RUNNER), json.dumps(config)],
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    fired = marker.read_text().split() if marker.exists() else []
    return Run(proc.returncode, proc.stdout, proc.stderr, fired)


def tail(run: Run) -> str:
    return f"exit {run.returncode}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-6000:]}"


def crash(config: dict[str, Any], tmp_path: Path, spec: str) -> None:
    """Run with ``spec`` armed and prove the run was killed there."""
    run = run_query(config, tmp_path, spec)
    assert run.returncode == -9, f"expected a SIGKILL at {spec}; {tail(run)}"
    # Two tasks running at once can both reach a task point before the kill lands.
    assert run.marker and set(run.marker) == {spec}, f"crashed at {run.marker}, armed {spec}"


def finish(config: dict[str, Any], tmp_path: Path, crash_at: str | None = None) -> Run:
    """Run (a restart) and prove it ended cleanly."""
    run = run_query(config, tmp_path, crash_at)
    assert run.returncode == 0, f"restarted query failed; {tail(run)}"
    return run


# --- the standard input and the checks ------------------------------------------------------


def expected(partition: int) -> list[bytes]:
    return [f"{partition}:{i:04d}".encode() for i in range(PER_PARTITION)]


def input_topic(kafka: EmbeddedKafka, new_topic: TopicFactory) -> str:
    topic = new_topic(partitions=PARTITIONS)
    kafka.produce(
        topic,
        ((p, v, v, None, None) for p in range(PARTITIONS) for v in expected(p)),
    )
    return topic


def sink_prefix(checkpoint: Path) -> str:
    return default_transactional_id_prefix(Checkpoint.resolve(str(checkpoint)).query_id())


def open_ids(kafka: EmbeddedKafka, checkpoint: Path) -> list[str]:
    return transaction_states.list_transactional_ids(
        {"bootstrap_servers": kafka.bootstrap_servers}, sink_prefix(checkpoint)
    )


def assert_commit_log_finished(checkpoint: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    assert log.unfinished_batch_ids() == []
    assert len(log.decided_batch_ids()) >= 3, "expected several batches"


def assert_kafka_exactly_once(kafka: EmbeddedKafka, output: str, checkpoint: Path) -> None:
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "last stable offset == end offset on every output partition",
    )
    wait_until(lambda: open_ids(kafka, checkpoint) == [], "no open transaction of the sink")
    by_partition: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        by_partition[record.partition].append(record.value)
    for p in range(PARTITIONS):
        got = by_partition.get(p, [])
        assert len(got) == len(set(got)), f"duplicates in output partition {p}"
        assert got == expected(p), (
            f"output partition {p}: {len(got)} records, order or content differs"
        )
    assert_commit_log_finished(checkpoint)


def assert_files_exactly_once(output: Path, checkpoint: Path) -> None:
    got = committed_values(output)
    for p in range(PARTITIONS):
        assert got.get(p, []) == expected(p), f"input partition {p} not exactly once in order"
    assert_no_stray_files(output)
    assert_commit_log_finished(checkpoint)
