"""The file sink as readers other than ours see it: Spark's ``read.parquet`` in another
application (this test process's session), pyarrow, pandas, DuckDB (both globs) and polars
(:mod:`output_readers`), while batches run, and Spark over a ``_spark_metadata`` log that
several queries share, compacted, with a retention. After a crash: test_sink_crash_matrix.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crash_runs import PARTITIONS, RUNNER, expected, input_topic
from file_sink_steps import OTHER, commit_log, make_participant, publish_batch
from output_readers import LISTING_READERS, batches_seen, committed_files, read_all
from unaligned._util.crash_points import kill_session
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.files.file_manifest import STAGING_DIR
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]


@pytest.mark.slow
def test_readers_while_batches_run_see_nothing_staged_and_whole_batches(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path, spark: Any
) -> None:
    """A query in its own application writes 3 batches, each task slowed so staged files are
    being written for seconds; meanwhile every reader reads the output again and again. Spark's
    readers see whole batches only; readers that list the directory see no staged row, no
    duplicate, no half-written file, and whole batches except at most the one being renamed."""
    output = tmp_path / "out"
    config = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": input_topic(kafka, new_topic),
        "output_path": str(output),
        "checkpoint": str(tmp_path / "checkpoint"),
        "max_offsets": 300,
        "slow_partition": 0,
        "slow_ms_per_row": 40,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNALIGNED_CRASH")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    log = tmp_path / "runner.log"
    with log.open("w") as sink:
        runner = subprocess.Popen(
            [sys.executable, str(RUNNER), json.dumps(config)],
            env=env,
            start_new_session=True,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    decisions = CommitLog(Checkpoint.resolve(config["checkpoint"]))
    observations: list[tuple[dict[str, list[bytes]], set[int]]] = []
    while_staged = 0
    deadline = time.monotonic() + 240
    try:
        while runner.poll() is None:
            assert time.monotonic() < deadline, "the query did not end in 240 s"
            staged = any(f.is_file() for f in (output / STAGING_DIR).rglob("*"))
            seen = read_all(output, spark)  # no reader may fail at any moment
            # Batches decided by the end of the read: no reader may see a row of another.
            observations.append((seen, set(decisions.decided_batch_ids())))
            while_staged += staged
    finally:
        if runner.poll() is None:
            kill_session(runner.pid)
    assert runner.wait() == 0, f"query failed: {log.read_text()[-6000:]}"
    batches = committed_files(output)
    assert sorted(batches) == [0, 1, 2]
    assert while_staged, "no read happened while tasks were writing staged files"
    seen_some = 0
    for observation, decided in observations:
        whole, partial = batches_seen(observation["spark read.parquet"], batches)
        assert not partial, f"Spark read part of a batch: {partial}"
        assert whole == list(range(len(whole))) and set(whole) <= decided, whole
        for reader in LISTING_READERS:
            whole, partial = batches_seen(observation[reader], batches)
            assert len(partial) <= 1 and set(partial) <= {len(whole)}, (reader, whole, partial)
            assert set(whole) | set(partial) <= decided, (reader, "undecided rows", decided)
        seen_some += bool(observation["pyarrow.dataset"])
    assert seen_some, "no read happened after the first commit"
    everything = sorted(v for p in range(PARTITIONS) for v in expected(p))
    for reader, values in read_all(output, spark).items():
        assert sorted(values) == everything, reader


def test_spark_reads_a_log_two_queries_share_compacted_and_with_retention(
    tmp_path: Path, spark: Any
) -> None:
    """25 log ids (compactions at 9 and 19, Spark's default interval), written by two
    queries in turn; then one query's retention drops its old batches at a compaction. Spark
    reads exactly what the log names, each file once."""
    first = make_participant(tmp_path)
    second = make_participant(tmp_path, query_id=OTHER, retention_ms=60_000)
    first_log, second_log = commit_log(tmp_path, "ck-1"), commit_log(tmp_path, "ck-2")
    old = int(time.time() * 1000) - 3_600_000
    for batch_id in range(13):
        publish_batch(first, first_log, batch_id)
        publish_batch(second, second_log, batch_id, partitions=1, decided_at_ms=old)
    output = tmp_path / "out"
    expected_ids = {p * 1000 + i for p in (0, 1) for i in range(3)}
    spark_ids = spark.read.parquet(str(output)).groupBy("id").count().collect()
    counts = {row["id"]: row["count"] for row in spark_ids}
    assert set(counts) == expected_ids
    # The first query's 13 batches of ids 0-2 and 1000-1002; the second query's batches
    # (ids 0-2) up to its last compaction (log id 19) expired.
    logged_second = sum(
        1 for line in second.spark_log().all_lines() if f"part-{OTHER}-" in str(line["path"])
    )
    assert 0 < logged_second < 13
    assert counts == {i: 13 + (logged_second if i < 1000 else 0) for i in expected_ids}
    assert len(list(output.glob("*.parquet"))) == 13 * 2 + 13  # expired files stay on disk
