"""Faults only a real cluster has: speculative copies, lost executor JVMs, stage retries.

Each query runs in ``integration/query_runner.py`` (a subprocess in its own session) on a
multi-JVM master, and is checked like the crash matrix (``test_sink_crash_matrix.py``): every
input record read back once (Kafka: ``read_committed``; files: the manifest; Iceberg and Delta:
pyiceberg's scan, deltalake's ``to_pyarrow_table``), in input order per partition; last stable
offset == end offset on every output partition and no open transaction of the sink's prefix; no
staging file, no data file the table does not name and no channel-state file left; every batch
finished. The targets and their checks: ``integration/fault_targets.py``. A fault runs with one
table format: attempts, their files and the clean-up are the table participant's, shared by
both formats (each format's data folder is covered by one fault).

- Speculation needs executors on *different hosts*: Spark never starts a speculative copy on a
  host where the task already has an attempt, and every ``local-cluster`` executor is on the
  same host. Those tests use :class:`cluster.StandaloneCluster` (workers on 127.0.0.2 and
  127.0.0.3), started once for the module.
- Executor kills and fetch failures use ``local-cluster[2,1,1024]``: the standalone workers in
  the driver JVM launch a replacement executor after a kill.

Helpers: ``integration/cluster.py``. These tests are expected to expose sink bugs (shared
channel-state file names between attempts, transactional ids reused when ``attemptNumber``
restarts at 0 in a new stage attempt): a failure names what the sink got wrong; harness
preconditions (the fault really happened) are asserted separately, with "harness:" messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import cluster
from fault_targets import FaultTarget, TopicFactory, make_input
from harness import wait_until
from unaligned.checkpoint import Checkpoint
from unaligned.kafka.transactions.transaction_states import list_transactional_ids
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.alone]

RUNNER = Path(__file__).with_name("query_runner.py")
LOCAL_CLUSTER = "local-cluster[2,1,1024]"
RUN_TIMEOUT_S = 240


# --- running the query ---------------------------------------------------------------------------


@dataclass
class Run:
    returncode: int
    output: str
    driver_log: str
    status: dict[str, Any]
    markers: list[dict[str, Any]] = field(default_factory=list)

    def tail(self) -> str:
        return f"exit {self.returncode}\n{self.output[-6000:]}"

    def summary(self) -> dict[str, Any]:
        for line in reversed(self.output.strip().splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        return {}


class Runner:
    """One query_runner.py process; ``controller(runner)`` runs while it does (kills etc.)."""

    def __init__(self, config: dict[str, Any], tmp_path: Path) -> None:
        self.dir = tmp_path / f"run-{time.monotonic_ns()}"
        self.dir.mkdir()
        self.markers_dir = self.dir / "markers"
        self.markers_dir.mkdir()
        self.status_file = self.dir / "status.json"
        self.driver_log = self.dir / "driver.log"
        self.output = self.dir / "runner.log"
        self.config = {
            **config,
            "work_dir": str(tmp_path / "spark-work"),
            "task_marker_dir": str(self.markers_dir),
            "status_file": str(self.status_file),
            "driver_log": str(self.driver_log),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Runner:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNALIGNED_CRASH")}
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.pop("SPARK_HOME", None)
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(RUNNER), json.dumps(self.config)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self, timeout_s: float = 120) -> dict[str, Any]:
        wait_until(
            lambda: self.status_file.exists() or not self.running(),
            "the runner's Spark session",
            timeout_s,
        )
        assert self.status_file.exists(), (
            f"harness: runner died at start\n{self.read_output()[-4000:]}"
        )
        return dict(json.loads(self.status_file.read_text()))

    def markers(self) -> list[dict[str, Any]]:
        out = []
        for path in self.markers_dir.iterdir():
            if not path.name.startswith("."):
                out.append(json.loads(path.read_text()))
        return sorted(out, key=lambda m: m["time"])

    def wait_marker(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout_s: float = 90
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            hits = [m for m in self.markers() if predicate(m)]
            if hits:
                return hits[0]
            assert self.running(), (
                f"harness: the query ended before {what}\n{self.read_output()[-4000:]}"
            )
            assert time.monotonic() < deadline, f"harness: timed out waiting for {what}"
            time.sleep(0.05)

    def read_output(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def wait(self, timeout_s: float = RUN_TIMEOUT_S) -> Run:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        status = json.loads(self.status_file.read_text()) if self.status_file.exists() else {}
        log = self.driver_log.read_text(errors="replace") if self.driver_log.exists() else ""
        return Run(self.proc.returncode, self.read_output(), log, status, self.markers())

    def kill(self) -> None:
        """SIGKILL the runner's whole session (its own processes only, found by session id)."""
        if self.proc is None:
            return
        session = self.proc.pid  # start_new_session: the runner leads its session
        for pid in cluster._pids():
            stat = cluster._stat(pid)
            if stat is not None and stat[2] == session:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        self.proc.wait(timeout=30)


def run_query(
    config: dict[str, Any], tmp_path: Path, controller: Callable[[Runner], None] | None = None
) -> Run:
    runner = Runner(config, tmp_path).start()
    try:
        if controller is not None:
            controller(runner)
        return runner.wait()
    finally:
        if runner.running():
            runner.kill()


def finished(run: Run) -> None:
    assert run.returncode == 0, f"the query failed; {run.tail()}"


# --- configuration ----------------------------------------------------------------------------


def base_config(
    kafka: EmbeddedKafka, topic: str, checkpoint: Path, max_offsets: int, **extra: Any
) -> dict[str, Any]:
    return {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "checkpoint": str(checkpoint),
        "max_offsets": max_offsets,
        **extra,
    }


# --- speculation (standalone cluster: two loopback hosts) ----------------------------------------

SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.multiplier": "2",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "500ms",
    # Python tasks report no input-rate metrics; judge by run time alone.
    "spark.speculation.efficiency.enabled": "false",
    "spark.task.maxFailures": "4",
}
SPEC_COUNTS = {0: 400, 1: 400, 2: 400, 3: 400}
SLOW_PARTITION = 3


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.StandaloneCluster]:
    with cluster.StandaloneCluster(
        tmp_path_factory.mktemp("standalone"), workers=2
    ) as spark_cluster:
        yield spark_cluster


def _speculation_config(
    kafka: EmbeddedKafka,
    topic: str,
    checkpoint: Path,
    master: str,
    slow_attempts: str,
    **extra: Any,
) -> dict[str, Any]:
    return base_config(
        kafka,
        topic,
        checkpoint,
        max_offsets=800,  # two batches of 200 records per partition
        master=master,
        spark_conf=SPECULATION_CONF,
        slow_partition=SLOW_PARTITION,
        slow_ms_per_row=15,  # 3 s per slow task attempt, the others take a fraction of a second
        slow_attempts=slow_attempts,
        # one read task per input partition, so that the slow partition's task is slow alone
        source_options={"readTasks": str(len(SPEC_COUNTS))},
        **extra,
    )


def _assert_speculated(run: Run) -> None:
    """Harness: a speculative copy of the slow task really ran (its marker has attempt >= 1)."""
    copies = [m for m in run.markers if m["partition"] == SLOW_PARTITION and m["attempt"] >= 1]
    speculative_starts = [s for s in cluster.task_starts(run.driver_log) if s.speculative]
    assert copies and speculative_starts, (
        "harness: no speculative copy of the slow task ran "
        f"(markers {[(m['batch'], m['partition'], m['attempt']) for m in run.markers]})"
    )


SPILL_TO_FILES = {
    "alignedCheckpointTimeout": "1s",
    "channelStateInlineThreshold": "1KB",  # spilled state goes to files
    "chunkRows": "50",
}


@pytest.mark.parametrize("slow_attempts", ["first"])  # "all" too when hunting a regression
def test_speculation_kafka_sink(
    slow_attempts: str,
    standalone: cluster.StandaloneCluster,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
) -> None:
    """A slow task gets a speculative copy on the other executor; one attempt wins the commit
    coordinator, the other is killed with its transaction open. ``first``: only attempt 0 is
    slow (the copy wins, the original dies mid-write); ``all``: both are slow and both spill
    channel state past ``alignedCheckpointTimeout`` (1 s)."""
    topic, expected = make_input(kafka, new_topic, SPEC_COUNTS, 256)
    sink = FaultTarget.make("kafka", tmp_path, new_topic)
    checkpoint = tmp_path / "checkpoint"
    config = _speculation_config(
        kafka,
        topic,
        checkpoint,
        standalone.master_url,
        slow_attempts,
        **sink.config(**SPILL_TO_FILES),
    )
    run = run_query(config, tmp_path)
    finished(run)
    _assert_speculated(run)
    sink.assert_exactly_once(kafka, expected, checkpoint)


@pytest.mark.parametrize("target", ["files", "iceberg"])
@pytest.mark.parametrize("slow_attempts", ["all"])  # "first" too when hunting a regression
def test_speculation_file_and_table_sinks(
    slow_attempts: str,
    target: str,
    standalone: cluster.StandaloneCluster,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    tmp_path: Path,
) -> None:
    """The same with the file sink (the losing attempt's staging file must not be published)
    and a table: only the winning attempt's data files are in the batch's table commit, and the
    loser's, whenever it writes them, do not stay in the data folder. Iceberg stands for both
    formats: attempts, items and the clean-up are the table participant's, shared by both; the
    formats differ in their data folder's layout, which the stage-retry test covers for Delta."""
    topic, expected = make_input(kafka, new_topic, SPEC_COUNTS, 256)
    sink = FaultTarget.make(target, tmp_path, new_topic)
    checkpoint = tmp_path / "checkpoint"
    config = _speculation_config(
        kafka,
        topic,
        checkpoint,
        standalone.master_url,
        slow_attempts,
        **sink.config(**SPILL_TO_FILES),
    )
    run = run_query(config, tmp_path)
    finished(run)
    _assert_speculated(run)
    sink.assert_exactly_once(kafka, expected, checkpoint)


# --- an executor JVM killed while channel state is pending (local-cluster) ------------------------

THROTTLE_BYTES_PER_S = 200_000
TABLE_SLOW_MS_PER_ROW = 5  # a table task's pace in this test: the throttled producer's
HOT_COUNTS = {0: 1200, 1: 200, 2: 200, 3: 200}
VALUE_BYTES = 1000


@pytest.mark.parametrize("target", ["kafka", "iceberg"])
def test_executor_killed_while_channel_state_is_pending(
    target: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Batch 0 is cut at its 1 s barrier and leaves channel state for the hot partition's task;
    while batch 1's task replays it (throttled producer; a table: the hot partition's rows
    slowed before the sink), its executor JVM and Python workers are SIGKILLed. Spark retries
    the task on the other (or the replacement) executor; the killed attempt's transaction (a
    table: its data files, if it had written any) and channel-state temp file are left behind.
    Iceberg stands for both formats: the killed attempt and its retry are the table
    participant's, shared by both."""
    topic, expected = make_input(kafka, new_topic, HOT_COUNTS, VALUE_BYTES)
    sink = FaultTarget.make(target, tmp_path, new_topic)
    checkpoint = tmp_path / "checkpoint"
    options = {
        "checkpointMode": "unaligned",
        "alignedCheckpointTimeout": "1s",
        "chunkRows": "100",
    }
    slow: dict[str, Any] = {}
    if target == "kafka":
        options["maxUnacknowledgedBytes"] = "65536"
    else:
        slow = {"slow_partition": 0, "slow_ms_per_row": TABLE_SLOW_MS_PER_ROW}
    config = base_config(
        kafka,
        topic,
        checkpoint,
        max_offsets=1000,
        master=LOCAL_CLUSTER,
        **slow,
        **sink.config(**options),
    )
    killed: dict[str, Any] = {}

    def kill_during_replay(runner: Runner) -> None:
        status = runner.status()
        log = CommitLog(Checkpoint.resolve(str(checkpoint)))

        def pending_after_batch_0() -> bool:
            record = log.read(0)
            return record is not None and bool(record.channel_state)

        wait_until(
            lambda: pending_after_batch_0() or not runner.running(), "batch 0's commit record", 90
        )
        record = log.read(0)
        assert record is not None and record.channel_state, (
            f"harness: batch 0 left no channel state to replay\n{runner.read_output()[-3000:]}"
        )
        heir = sorted(record.channel_state)[0]
        marker = runner.wait_marker(
            lambda m: m["batch"] == 1 and m["partition"] == heir, f"batch 1's task {heir}"
        )
        prefix = sink.prefix
        if prefix is not None:
            # Kill mid-write: batch 1 has a transaction open (batch 0's are committed by now;
            # the heir's opens with the first row it replays). Ids are the sink's business.
            wait_until(
                lambda: bool(
                    list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix)
                ),
                "an open transaction of batch 1",
                30,
            )
        else:
            time.sleep(0.3)  # the heir's rows trickle in for seconds: kill it mid-write
        found = cluster.executors(session=status["session"])
        victim = cluster.executor_of(marker["pid"], found)
        assert victim is not None, f"harness: no executor above pid {marker['pid']} in {found}"
        killed["executor"] = victim
        killed["pids"] = cluster.kill_executor(victim)
        killed["at"] = time.time()
        cluster.wait_gone(killed["pids"])

    if target == "kafka":
        kafka.throttle_producers(THROTTLE_BYTES_PER_S)  # the input is in: slow down the sink
    try:
        run = run_query(config, tmp_path, kill_during_replay)
    finally:
        kafka.throttle_producers(None)
    finished(run)
    assert killed, "harness: nothing was killed"
    # Harness: the killed task was lost mid-batch and ran again (attempt >= 1).
    assert "ExecutorLostFailure" in run.driver_log, "harness: no task was lost with the executor"
    retried = [s for s in cluster.task_starts(run.driver_log) if s.attempt >= 1]
    assert retried, "harness: no task was retried after the executor was killed"
    sink.assert_exactly_once(kafka, expected, checkpoint)


# --- a fetch failure and a stage retry (local-cluster, a shuffle before the sink) ----------------

FETCH_COUNTS = {0: 300, 1: 300, 2: 300, 3: 300}


@pytest.mark.parametrize("target", ["kafka", "delta"])
@pytest.mark.parametrize("mode", ["unaligned"])  # aligned: the same attempt rules, less state
def test_fetch_failure_stage_retry(
    mode: str, target: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Batch 1 shuffles by key before the sink; both sink tasks are slow (the slow partition's
    rows are spread over both). The JVM of the executor running sink task 1 is SIGKILLed: its
    map output is gone (no external shuffle service), so task 1's re-run fails to fetch, and
    Spark resubmits the map stage, then the result stage as attempt 1 for partitions 0 and 1,
    with ``attemptNumber`` 0 again. Partition 0's attempt of stage attempt 0 (the zombie) is
    still running: the retry's partition 0 runs next to it, with the same partition and
    attempt number, and starts writing after the zombie prepared; the zombie's result is the
    one Spark keeps (the retry is denied the commit).

    ``aligned``: both write rows into transactions. ``unaligned`` (1 s barrier timeout, chunks
    of 10 rows, state files from 1 KB): both write a chunk, then spill the rest as channel state
    for the same task index and barrier.

    Delta: the zombie's and the retry's data files have different names (a random token per
    attempt), only the zombie's are in the batch's commit, and the retry's, written as the batch
    is decided, do not stay in the table's folder. Delta stands for both formats (the attempts'
    files and their clean-up are the table participant's); its data folder is the table's own
    folder, next to ``_delta_log``, which the clean-up's listing must leave alone."""
    topic, expected = make_input(kafka, new_topic, FETCH_COUNTS)
    sink = FaultTarget.make(target, tmp_path, new_topic)
    checkpoint = tmp_path / "checkpoint"
    sink_options = {"checkpointMode": mode}
    if mode == "unaligned":
        # Rows reach the sink in one Arrow batch after the slow step: small chunks let the
        # barrier cut after the first one and spill the rest.
        sink_options.update(
            alignedCheckpointTimeout="1s", channelStateInlineThreshold="1KB", chunkRows="10"
        )
    config = base_config(
        kafka,
        topic,
        checkpoint,
        max_offsets=600,  # two batches of 150 records per partition
        master=LOCAL_CLUSTER,
        shuffle_before_sink="key",
        slow_partition=SLOW_PARTITION,
        slow_ms_per_row=250,  # ~75 slow rows per sink task: ~19 s, batch 1 only
        slow_batches=[1],
        spark_conf={
            "spark.shuffle.service.enabled": "false",
            # Executors share one host: without this a reducer reads a dead executor's shuffle
            # files straight from its disk and never fails to fetch.
            "spark.shuffle.readHostLocalDisk": "false",
            "spark.task.maxFailures": "4",
        },
        **sink.config(**sink_options),
    )
    killed: dict[str, Any] = {}

    def kill_executor_of_task_1(runner: Runner) -> None:
        status = runner.status()
        # Both sink tasks have started (one per executor) before the kill.
        runner.wait_marker(lambda m: m["batch"] == 1 and m["partition"] == 0, "sink task 0")
        marker = runner.wait_marker(
            lambda m: m["batch"] == 1 and m["partition"] == 1, "sink task 1", 30
        )
        found = cluster.executors(session=status["session"])
        target = cluster.executor_of(marker["pid"], found)
        assert target is not None, f"harness: no executor above pid {marker['pid']} in {found}"
        killed["executor"] = target
        killed["result_stage"] = marker["stage"]
        killed["pids"] = cluster.kill_executor(target)
        cluster.wait_gone(killed["pids"])

    run = run_query(config, tmp_path, kill_executor_of_task_1)
    assert killed, "harness: nothing was killed"
    # Harness: the kill made a fetch fail and the result stage ran again as attempt 1, with
    # task attempt numbers starting at 0 again, next to the zombie of stage attempt 0.
    stage = killed["result_stage"]
    spans = [s for s in cluster.task_spans(run.driver_log) if s.stage == stage]
    assert cluster.fetch_failure_lines(run.driver_log), (
        f"harness: no fetch failure in the driver log; stage {stage}: {spans}"
    )
    first = {(s.partition, s.attempt) for s in spans if s.stage_attempt == 0}
    retry = {(s.partition, s.attempt) for s in spans if s.stage_attempt >= 1}
    assert retry & first, f"harness: stage {stage} not retried reusing attempt numbers: {spans}"
    twins = [
        (z.tid, r.tid)
        for z in spans
        for r in spans
        if z.stage_attempt == 0
        and r.stage_attempt >= 1
        and (z.partition, z.attempt) == (r.partition, r.attempt)
        and r.start < (z.end if z.end >= 0 else float("inf"))
    ]
    assert twins, f"harness: no retried task ran next to its zombie twin: {spans}"
    finished(run)
    sink.assert_exactly_once(kafka, expected, checkpoint, order="key")
