"""Liveness after a restart on another host: the idle-barrier hint is on the driver's local disk.

The first run (``query_runner.py``, a slow throttled Kafka sink, unaligned barriers) commits a
batch that leaves channel state pending and then stops between batches. The restart points
``UNALIGNED_IDLE_BARRIER_DIR`` at a new empty directory, as a driver on another host (YARN
cluster mode, Kubernetes) would see, and runs with ``availableNow`` and no new input. The pending
state must still be written: every record reaches the output exactly once (read_committed) and
the query ends with no state left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from harness import produce_skewed
from unaligned._util.crash_points import session_process_groups
from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.barriers.metrics import read_metrics
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

RUNNER = Path(__file__).with_name("query_runner.py")
PARTITIONS = 4
HOT_RECORDS = 1200  # partition 0: about 6 s through the throttle, cut after 1 s
COLD_RECORDS = 200
VALUE_BYTES = 1000
THROTTLE_BYTES_PER_S = 200_000


def _produce_input(kafka: EmbeddedKafka, topic: str) -> dict[int, list[bytes]]:
    counts = [HOT_RECORDS] + [COLD_RECORDS] * (PARTITIONS - 1)
    return produce_skewed(kafka, topic, counts, VALUE_BYTES)


def _env(hint_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("UNALIGNED_CRASH_AT", None)
    env[HINT_DIR_ENV] = str(hint_dir)
    return env


def _stop_session(proc: subprocess.Popen[bytes]) -> None:
    """Stop the runner, its JVM and every Python worker (the runner leads its session)."""
    for group in sorted(session_process_groups(proc.pid) | {proc.pid}):
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=60)


def _run_until_state_is_pending(config: dict[str, Any], hint_dir: Path, log: Path) -> int:
    """Run with a long processing-time trigger; once Spark has committed a batch that left
    channel state pending (the next trigger is far away, nothing runs), stop the query. Returns
    that batch id."""
    checkpoint = Path(config["checkpoint"])
    commit_log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(RUNNER), json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(hint_dir),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"the first run ended early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, "no batch committed with state pending in time"
            for batch in commit_log.decided_batch_ids():
                record = commit_log.read(batch)
                spark_committed = (checkpoint / "commits" / str(batch)).exists()
                if record is not None and record.channel_state and spark_committed:
                    return batch
            time.sleep(0.2)
    finally:
        _stop_session(proc)


def _run_available_now(config: dict[str, Any], hint_dir: Path, log: Path) -> dict[str, Any]:
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, str(RUNNER), json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(hint_dir),
            start_new_session=True,
            timeout=420,
        )
    output = log.read_text()
    if proc.returncode != 0:
        pytest.fail(f"the restarted query failed ({proc.returncode}):\n{output[-4000:]}")
    summary: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return summary


@pytest.mark.slow
def test_restart_on_another_host_with_no_new_input_writes_the_pending_state(
    kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    expected = _produce_input(kafka, topic)
    output = new_topic(partitions=PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    first_host, second_host = tmp_path / "host-a-hints", tmp_path / "host-b-hints"
    second_host.mkdir()
    config: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "max_offsets": 100_000,
        "trigger": "120 seconds",  # after batch 0 nothing runs for two minutes
        "stop_after_rows": 10**9,
        "timeout_s": 600,
        "extra_sink_options": {
            "alignedCheckpointTimeout": "1s",
            "chunkRows": "100",
            "maxUnacknowledgedBytes": "65536",
            "transactionalIdPrefix": f"ua-restart-{tmp_path.name}",
        },
    }
    kafka.throttle_producers(THROTTLE_BYTES_PER_S)
    try:
        pending_batch = _run_until_state_is_pending(config, first_host, tmp_path / "run-1.log")
        # The first host's driver published the hint; the second host never sees it.
        assert [p.name for p in first_host.iterdir() if p.suffix == ".json"]
        assert not any(second_host.iterdir())
        summary = _run_available_now(
            {**config, "trigger": "availableNow"}, second_host, tmp_path / "run-2.log"
        )
    finally:
        kafka.throttle_producers(None)

    assert summary["rows"] and all(rows == 0 for rows in summary["rows"]), summary  # no new input
    assert summary["batches"] and min(summary["batches"]) > pending_batch, summary

    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        got[record.partition].append(record.value)
    for partition, values in expected.items():
        assert len(got[partition]) == len(values), f"partition {partition}: count differs"
        assert got[partition] == values, f"partition {partition}: order or content differs"
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)  # nothing left open

    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    latest = log.read(log.decided_batch_ids()[-1])
    assert latest is not None and latest.channel_state == {}, "channel state left pending"
    assert log.is_done(latest.batch_id)
    state_dir = checkpoint / "unaligned" / "channel-state"
    leftovers = [p for p in state_dir.rglob("*") if p.is_file()] if state_dir.exists() else []
    assert leftovers == [], f"channel-state files left: {leftovers}"
    # The restart's first barrier replayed the state the first run left.
    replayed = [
        m for m in read_metrics(Checkpoint.resolve(str(checkpoint))) if m.batch_id > pending_batch
    ]
    assert replayed and replayed[0].rows_replayed > 0, replayed
    assert not list(second_host.glob("*.json")), "hint left pending"
