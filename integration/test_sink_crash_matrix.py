"""The crash matrix: kill the whole query at each named crash point, restart, prove exactly-once.

Each case runs ``integration/query_runner.py`` (Kafka source, 4 input partitions, 4 x 200
records, ``maxOffsetsPerTrigger=300`` -> 3 batches, ``trigger(availableNow=True)``) in a
new session with a crash point armed for batch 1, checks that the crash happened there and left
something to recover, restarts from the same checkpoint without the crash point, and proves:

- every input record is in the output exactly once (Kafka: read_committed consumer; files: the
  manifest, and every other reader of :mod:`output_readers`: Spark's ``read.parquet`` in this
  test process, pyarrow, pandas, DuckDB, polars), in input order per partition (records go to
  the output partition they came from);
- no transaction of the sink is open (last stable offset == end offset on every output
  partition, and ``list_transactional_ids(prefix)`` is empty); no staging file is left, and no
  data file exists that the manifest does not name;
- the sink's commit log has every batch finished.

For the file sink, every reader also reads the output right after the crash, before the
restart: each sees whole batches only, except that readers listing the directory may see part
of the batch whose renames the crash interrupted (docs/guides/files.md, "Reading the output").

A task failure that Spark retries (``local[2,3]``; raised after pre-commit on attempt 0, so its
prepared transaction is left open) is covered too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crash_runs import (
    PARTITIONS,
    assert_files_exactly_once,
    assert_kafka_exactly_once,
    crash,
    expected,
    finish,
    input_topic,
    open_ids,
)
from harness import committed_values
from output_readers import LISTING_READERS, batches_seen, committed_files, read_all
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.files.file_manifest import STAGING_DIR
from unaligned.sink.topics import kafka_id_pool
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

MAX_OFFSETS = 300
CRASH_BATCH = 1

TopicFactory = Callable[..., str]


# --- what each crash leaves behind (proves the crash point had something to recover) ------------


def _after_crash_state(checkpoint: Path) -> tuple[bool, bool]:
    """(batch 1 has a commit record, batch 1 is done)."""
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    return log.read(CRASH_BATCH) is not None, log.is_done(CRASH_BATCH)


EXPECTED_STATE = {
    "task_after_precommit": (False, False),
    "driver_before_commit_record": (False, False),
    "driver_after_commit_record": (True, False),
    "driver_partial_commit": (True, False),
    "driver_after_spark_log": (True, False),
    "driver_after_sink_commit": (True, True),
}

KAFKA_POINTS = [p for p in EXPECTED_STATE if p != "driver_after_spark_log"]
# The file sink's own steps: rolling a decision forward (renames, _spark_metadata, manifest)
# from none renamed, from some renamed, and from the batch in _spark_metadata but not in the
# manifest. Aborting an undecided batch and a batch Spark was not told of go through the same
# driver code as for Kafka (the points above), and cost two minutes each here.
FILE_POINTS = [
    "driver_after_commit_record",
    "driver_partial_commit",
    "driver_after_spark_log",
]
# What each reader sees of batch 1 after the crash (batch 0 is whole for all): Spark's readers
# read _spark_metadata, ours the manifest, the others list the directory.
SEEN_AFTER_CRASH = {
    "driver_after_commit_record": {"spark": "none", "listing": "none", "ours": "none"},
    "driver_partial_commit": {"spark": "none", "listing": "part", "ours": "none"},
    "driver_after_spark_log": {"spark": "whole", "listing": "whole", "ours": "none"},
}


# --- Kafka sink -----------------------------------------------------------------------------------


def _kafka_config(
    kafka: EmbeddedKafka, new_topic: TopicFactory, checkpoint: Path
) -> tuple[dict[str, Any], str]:
    output = new_topic(partitions=PARTITIONS)
    config = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": input_topic(kafka, new_topic),
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
    crash(config, tmp_path, spec)
    assert _after_crash_state(checkpoint) == EXPECTED_STATE[point]
    if point != "driver_after_sink_commit":
        assert open_ids(kafka, checkpoint), "the crash left no open transaction to recover"
        assert kafka.last_stable_offsets(output) != kafka.end_offsets(output)
    finish(config, tmp_path)
    assert_kafka_exactly_once(kafka, output, checkpoint)


def test_kafka_sink_crash_during_recovery(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Crash after the decision, then crash again in the middle of recovery's roll-forward."""
    checkpoint = tmp_path / "checkpoint"
    config, output = _kafka_config(kafka, new_topic, checkpoint)
    crash(config, tmp_path, f"driver_after_commit_record@{CRASH_BATCH}")
    crash(config, tmp_path, f"recovery@{CRASH_BATCH}")  # while rolling batch 1 forward
    assert _after_crash_state(checkpoint) == (True, False)
    finish(config, tmp_path)
    assert_kafka_exactly_once(kafka, output, checkpoint)


@pytest.mark.parametrize("fail_point", ["task_fail_first_attempt", "task_fail_after_claim"])
def test_kafka_sink_task_retry_loses_and_duplicates_nothing(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path, fail_point: str
) -> None:
    """Attempt 0 of batch 1's tasks fails and Spark retries: ``task_fail_first_attempt``
    prepares, then raises; ``task_fail_after_claim`` claims its id (``InitProducerId``, nothing
    written) and dies. Attempt 1 claims an id of its own lane, never the one attempt 0 may still
    hold, and its transactions are the committed ones. Exactly once, read back read_committed."""
    checkpoint = tmp_path / "checkpoint"
    config, output = _kafka_config(kafka, new_topic, checkpoint)
    run = finish(config, tmp_path, crash_at=f"{fail_point}@{CRASH_BATCH}")
    assert run.marker and set(run.marker) == {f"{fail_point}@{CRASH_BATCH}"}
    assert_kafka_exactly_once(kafka, output, checkpoint)
    record = CommitLog(Checkpoint.resolve(str(checkpoint))).read(CRASH_BATCH)
    assert record is not None
    slots = {item["transactionalId"].rsplit("-", 1)[1] for item in record.prepared}
    retried = str(kafka_id_pool.slot(kafka_id_pool.lane(CRASH_BATCH, 1), 0))
    assert slots == {retried}, "the committed transactions of batch 1 are the retried attempts"


# --- file sink ------------------------------------------------------------------------------------


def _batch_one(values: list[bytes], batches: dict[int, dict[str, list[bytes]]]) -> str:
    """How much of batch 1 ``values`` holds, after batch 0 whole and nothing of batch 2."""
    whole, partial = batches_seen(values, batches)
    assert 0 in whole and 2 not in whole and 2 not in partial, (whole, partial)
    if 1 in whole:
        return "whole"
    if 1 in partial:
        return "part"
    return "none"


@pytest.mark.parametrize("point", FILE_POINTS)
def test_file_sink_crash_point(
    point: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path, spark: Any
) -> None:
    checkpoint = tmp_path / "checkpoint"
    output = tmp_path / "out"
    config = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": input_topic(kafka, new_topic),
        "output_path": str(output),
        "checkpoint": str(checkpoint),
        "max_offsets": MAX_OFFSETS,
    }
    spec = f"{point}@{CRASH_BATCH}"
    crash(config, tmp_path, spec)
    assert _after_crash_state(checkpoint) == EXPECTED_STATE[point]
    if point != "driver_after_spark_log":
        assert any(f.is_file() for f in (output / STAGING_DIR).rglob("*")), (
            "nothing staged to recover"
        )
    seen = read_all(output, spark)
    ours = [v for values in committed_values(output).values() for v in values]
    finish(config, tmp_path)
    assert_files_exactly_once(output, checkpoint)
    batches = committed_files(output)
    assert sorted(batches) == [0, 1, 2] and len(batches[1]) >= 2
    wanted = SEEN_AFTER_CRASH[point]
    assert _batch_one(ours, batches) == wanted["ours"]
    assert _batch_one(seen["spark read.parquet"], batches) == wanted["spark"]
    for reader in LISTING_READERS:
        assert _batch_one(seen[reader], batches) == wanted["listing"], reader
    everything = sorted(v for p in range(PARTITIONS) for v in expected(p))
    for reader, values in read_all(output, spark).items():
        assert sorted(values) == everything, f"{reader} after the restart"
