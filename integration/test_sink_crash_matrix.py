"""The crash matrix: kill the whole query at each named crash point, restart, prove exactly-once.

Each case runs ``integration/query_runner.py`` (Kafka source, 4 input partitions, 4 x 200
records, ``maxOffsetsPerTrigger=300`` -> 3 batches, ``trigger(availableNow=True)``) in a
new session with a crash point armed for batch 1, checks that the crash happened there and left
something to recover, restarts from the same checkpoint without the crash point, and proves:

- every input record is in the output exactly once (Kafka: read_committed consumer; files: the
  manifest), in input order per partition (records go to the output partition they came from);
- no transaction of the sink is open (last stable offset == end offset on every output
  partition, and ``list_transactional_ids(prefix)`` is empty); no staging file is left, and no
  data file exists that the manifest does not name;
- the sink's commit log has every batch finished.

A task failure that Spark retries (``local[2,3]``; raised after pre-commit on attempt 0, so its
prepared transaction is left open) is covered too.
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

import pytest

from harness import wait_until
from unaligned import crash_points
from unaligned.barriers.offset_log import read_query_id
from unaligned.kafka import transaction_states
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.committed_files import read_committed_files
from unaligned.sink.file_manifest import MANIFEST_DIR, STAGING_DIR
from unaligned.sink.stream_writer_factory import default_transactional_id_prefix
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

RUNNER = Path(__file__).with_name("query_runner.py")
PARTITIONS = 4
PER_PARTITION = 200
MAX_OFFSETS = 300
CRASH_BATCH = 1
RUN_TIMEOUT_S = 300

TopicFactory = Callable[..., str]


# --- running the query ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    marker: list[str]


def _run(config: dict[str, Any], tmp_path: Path, crash_at: str | None) -> Run:
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


def _tail(run: Run) -> str:
    return f"exit {run.returncode}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-6000:]}"


def _crash(config: dict[str, Any], tmp_path: Path, spec: str) -> None:
    run = _run(config, tmp_path, spec)
    assert run.returncode == -9, f"expected a SIGKILL at {spec}; {_tail(run)}"
    # Two tasks running at once can both reach a task point before the kill lands.
    assert run.marker and set(run.marker) == {spec}, f"crashed at {run.marker}, armed {spec}"


def _finish(config: dict[str, Any], tmp_path: Path, crash_at: str | None = None) -> Run:
    run = _run(config, tmp_path, crash_at)
    assert run.returncode == 0, f"restarted query failed; {_tail(run)}"
    return run


# --- input and checks -----------------------------------------------------------------------------


def _expected(partition: int) -> list[bytes]:
    return [f"{partition}:{i:04d}".encode() for i in range(PER_PARTITION)]


def _input_topic(kafka: EmbeddedKafka, new_topic: TopicFactory) -> str:
    topic = new_topic(partitions=PARTITIONS)
    kafka.produce(
        topic,
        ((p, v, v, None, None) for p in range(PARTITIONS) for v in _expected(p)),
    )
    return topic


def _prefix(checkpoint: Path) -> str:
    return default_transactional_id_prefix(read_query_id(str(checkpoint)))


def _open_ids(kafka: EmbeddedKafka, checkpoint: Path) -> list[str]:
    return transaction_states.list_transactional_ids(
        {"bootstrap_servers": kafka.bootstrap_servers}, _prefix(checkpoint)
    )


def _assert_commit_log_finished(checkpoint: Path) -> None:
    log = CommitLog.under_checkpoint(str(checkpoint))
    assert log.unfinished_batch_ids() == []
    assert len(log.decided_batch_ids()) >= 3, "expected several batches"


def _assert_kafka_exactly_once(kafka: EmbeddedKafka, output: str, checkpoint: Path) -> None:
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "last stable offset == end offset on every output partition",
    )
    wait_until(lambda: _open_ids(kafka, checkpoint) == [], "no open transaction of the sink")
    by_partition: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        by_partition[record.partition].append(record.value)
    for p in range(PARTITIONS):
        got = by_partition.get(p, [])
        assert len(got) == len(set(got)), f"duplicates in output partition {p}"
        assert got == _expected(p), (
            f"output partition {p}: {len(got)} records, order or content differs"
        )
    _assert_commit_log_finished(checkpoint)


def _assert_files_exactly_once(output: Path, checkpoint: Path) -> None:
    table = read_committed_files(str(output))
    by_partition: dict[int, list[bytes]] = defaultdict(list)
    for partition, value in zip(
        table.column("partition").to_pylist(), table.column("value").to_pylist(), strict=True
    ):
        by_partition[partition].append(value)
    for p in range(PARTITIONS):
        assert by_partition.get(p, []) == _expected(p), (
            f"input partition {p} not exactly once in order"
        )
    staged = [f for f in (output / STAGING_DIR).rglob("*") if f.is_file()]
    assert staged == [], f"staging files left: {staged}"
    listed = set()
    for entry in (output / MANIFEST_DIR).glob("*.json"):
        listed.update(f["path"] for f in json.loads(entry.read_text())["files"])
    data_files = {f.name for f in output.glob("*.parquet")}
    assert data_files == listed, f"data files not in the manifest: {data_files - listed}"
    _assert_commit_log_finished(checkpoint)


# --- what each crash leaves behind (proves the crash point had something to recover) ------------


def _after_crash_state(checkpoint: Path) -> tuple[bool, bool]:
    """(batch 1 has a commit record, batch 1 is done)."""
    log = CommitLog.under_checkpoint(str(checkpoint))
    return log.read(CRASH_BATCH) is not None, log.is_done(CRASH_BATCH)


EXPECTED_STATE = {
    "task_after_precommit": (False, False),
    "driver_before_commit_record": (False, False),
    "driver_after_commit_record": (True, False),
    "driver_partial_commit": (True, False),
    "driver_after_sink_commit": (True, True),
}

KAFKA_POINTS = list(EXPECTED_STATE)
FILE_POINTS = [
    "driver_before_commit_record",
    "driver_after_commit_record",
    "driver_partial_commit",
    "driver_after_sink_commit",
]


# --- Kafka sink -----------------------------------------------------------------------------------


def _kafka_config(
    kafka: EmbeddedKafka, new_topic: TopicFactory, checkpoint: Path
) -> tuple[dict[str, Any], str]:
    output = new_topic(partitions=PARTITIONS)
    config = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": _input_topic(kafka, new_topic),
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "max_offsets": MAX_OFFSETS,
    }
    return config, output


@pytest.mark.parametrize("point", KAFKA_POINTS)
def test_kafka_sink_crash_point(
    point: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    config, output = _kafka_config(kafka, new_topic, checkpoint)
    spec = f"{point}@{CRASH_BATCH}"
    _crash(config, tmp_path, spec)
    assert _after_crash_state(checkpoint) == EXPECTED_STATE[point]
    if point != "driver_after_sink_commit":
        assert _open_ids(kafka, checkpoint), "the crash left no open transaction to recover"
        assert kafka.last_stable_offsets(output) != kafka.end_offsets(output)
    _finish(config, tmp_path)
    _assert_kafka_exactly_once(kafka, output, checkpoint)


def test_kafka_sink_crash_during_recovery(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Crash after the decision, then crash again in the middle of recovery's roll-forward."""
    checkpoint = tmp_path / "checkpoint"
    config, output = _kafka_config(kafka, new_topic, checkpoint)
    _crash(config, tmp_path, f"driver_after_commit_record@{CRASH_BATCH}")
    _crash(config, tmp_path, f"recovery@{CRASH_BATCH}")  # while rolling batch 1 forward
    assert _after_crash_state(checkpoint) == (True, False)
    _finish(config, tmp_path)
    _assert_kafka_exactly_once(kafka, output, checkpoint)


def test_kafka_sink_task_retry_loses_and_duplicates_nothing(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Attempt 0 of batch 1's tasks prepares, then raises; Spark retries; attempt 1 commits."""
    checkpoint = tmp_path / "checkpoint"
    config, output = _kafka_config(kafka, new_topic, checkpoint)
    run = _finish(config, tmp_path, crash_at=f"task_fail_first_attempt@{CRASH_BATCH}")
    assert run.marker and set(run.marker) == {f"task_fail_first_attempt@{CRASH_BATCH}"}
    _assert_kafka_exactly_once(kafka, output, checkpoint)
    record = CommitLog.under_checkpoint(str(checkpoint)).read(CRASH_BATCH)
    assert record is not None
    attempts = {item["transactionalId"].rsplit("-", 1)[1] for item in record.prepared}
    assert attempts == {"1"}, "the committed transactions of batch 1 are the retried attempts"


# --- file sink ------------------------------------------------------------------------------------


@pytest.mark.parametrize("point", FILE_POINTS)
def test_file_sink_crash_point(
    point: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    output = tmp_path / "out"
    config = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": _input_topic(kafka, new_topic),
        "output_path": str(output),
        "checkpoint": str(checkpoint),
        "max_offsets": MAX_OFFSETS,
    }
    spec = f"{point}@{CRASH_BATCH}"
    _crash(config, tmp_path, spec)
    assert _after_crash_state(checkpoint) == EXPECTED_STATE[point]
    if point != "driver_after_sink_commit":
        assert any(f.is_file() for f in (output / STAGING_DIR).rglob("*")), (
            "nothing staged to recover"
        )
    _finish(config, tmp_path)
    _assert_files_exactly_once(output, checkpoint)
