"""Kafka -> format("unaligned") -> an Iceberg or a Delta table, exactly once through crashes.

Each query runs ``integration/query_runner.py`` (4 input partitions x 200 records,
``maxOffsetsPerTrigger=300`` -> 3 batches, ``availableNow``) in a session of its own, with a
crash point armed for batch 1 (:mod:`crash_runs`), then again from the same checkpoint. After
the restart every record is in the table exactly once, read by the formats' own readers
(deltalake's ``to_pyarrow_table``, pyiceberg's scan: :mod:`table_readers`); every commit of the
query is stamped with its batch id once, with the Kafka offsets the batch read; and the data
folder holds no Parquet file the table's current snapshot does not name (files of undecided
batches, of killed or retried attempts are removed).

The crash points: a task's files written and the driver killed before any decision
(``task_after_precommit``, ``driver_before_commit_record``); the decision durable, the table not
committed (``driver_after_commit_record``); the table committed, the sink not done
(``driver_after_table_commit``: a commit whose answer was lost); everything done but Spark's
commit (``driver_after_sink_commit``); killed again while recovery rolls the batch forward; a
task attempt failing after its files were written (Spark retries it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from crash_runs import PARTITIONS, crash, expected, finish, input_topic, run_query, tail
from table_readers import TableUnderTest
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

MAX_OFFSETS = 300
CRASH_BATCH = 1
FORMATS = ["delta", "iceberg"]

TopicFactory = Callable[..., str]

# (batch 1 has a commit record, batch 1 is done, batch 1 is in the table) after the crash
EXPECTED_STATE = {
    "task_after_precommit": (False, False, False),
    "driver_before_commit_record": (False, False, False),
    "driver_after_commit_record": (True, False, False),
    "driver_after_table_commit": (True, False, True),
    "driver_after_sink_commit": (True, True, True),
}


def table_config(
    kafka: EmbeddedKafka,
    topic: str,
    checkpoint: Path,
    table: TableUnderTest,
    **sink: str,
) -> dict[str, Any]:
    return {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": topic,
        "checkpoint": str(checkpoint),
        "max_offsets": MAX_OFFSETS,
        "extra_sink_options": table.sink_options(**sink),
    }


def query_id(checkpoint: Path) -> str:
    return Checkpoint.resolve(str(checkpoint)).query_id()


def assert_table_exactly_once(
    table: TableUnderTest, checkpoint: Path, batches: int = 3, copies: int = 1
) -> None:
    """Every input record ``copies`` times (one per query writing), each batch of this query
    committed once, no file outside the table's snapshot, the commit log finished."""
    got = table.values_by_partition()
    for p in range(PARTITIONS):
        want = sorted(expected(p) * copies)
        assert sorted(got.get(p, [])) == want, f"input partition {p} not exactly once"
    assert table.batches_of(query_id(checkpoint)) == list(range(batches))
    on_disk, named = table.files_on_disk(), table.files_in_table()
    assert on_disk == named, f"files outside the table: {sorted(on_disk - named)}"
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    assert log.unfinished_batch_ids() == []


def _state(table: TableUnderTest, checkpoint: Path) -> tuple[bool, bool, bool]:
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    in_table = table.exists() and CRASH_BATCH in table.batches_of(query_id(checkpoint))
    return log.read(CRASH_BATCH) is not None, log.is_done(CRASH_BATCH), in_table


# The table commit's points run for both formats (their idempotence checks differ: Delta's app
# transaction, Iceberg's table property and lineage); the points before it go through the same
# shared code for both (a minute per case), so each format takes some of them.
CASES = [
    ("delta", "task_after_precommit"),
    ("iceberg", "driver_before_commit_record"),
    ("delta", "driver_after_commit_record"),
    ("delta", "driver_after_table_commit"),
    ("iceberg", "driver_after_table_commit"),
    ("iceberg", "driver_after_sink_commit"),
]


@pytest.mark.parametrize(("fmt", "point"), CASES)
def test_table_sink_crash_point(
    fmt: str, point: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    table = TableUnderTest.make(fmt, tmp_path)
    checkpoint = tmp_path / "checkpoint"
    config = table_config(kafka, input_topic(kafka, new_topic), checkpoint, table)
    crash(config, tmp_path, f"{point}@{CRASH_BATCH}")
    assert _state(table, checkpoint) == EXPECTED_STATE[point]
    if point in ("task_after_precommit", "driver_before_commit_record"):
        leftovers = table.files_on_disk() - table.files_in_table()
        assert leftovers, "the crash left no data file to remove"
    finish(config, tmp_path)
    assert_table_exactly_once(table, checkpoint)
    offsets = table.kafka_offsets(query_id(checkpoint))
    ends = [sum(to for parts in o.values() for _, to in parts.values()) for o in offsets]
    assert ends[-1] == PARTITIONS * 200 and ends == sorted(ends), offsets


@pytest.mark.parametrize("fmt", ["delta"])
def test_table_sink_crash_during_recovery(
    fmt: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Decided, killed; then killed again in recovery right after the roll-forward's table
    commit (before the batch is marked done): the next run finds the batch in the table."""
    table = TableUnderTest.make(fmt, tmp_path)
    checkpoint = tmp_path / "checkpoint"
    config = table_config(kafka, input_topic(kafka, new_topic), checkpoint, table)
    crash(config, tmp_path, f"driver_after_commit_record@{CRASH_BATCH}")
    crash(config, tmp_path, f"recovery@{CRASH_BATCH}")
    assert _state(table, checkpoint) == (True, False, True)
    finish(config, tmp_path)
    assert_table_exactly_once(table, checkpoint)


@pytest.mark.parametrize("fmt", ["iceberg"])
def test_table_sink_retried_task_attempt_leaves_no_file(
    fmt: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Attempt 0 of batch 1's tasks writes its files, then fails; Spark retries. Only attempt
    1's files enter the table; attempt 0's are removed."""
    table = TableUnderTest.make(fmt, tmp_path)
    checkpoint = tmp_path / "checkpoint"
    config = table_config(kafka, input_topic(kafka, new_topic), checkpoint, table)
    run = finish(config, tmp_path, crash_at=f"task_fail_first_attempt@{CRASH_BATCH}")
    assert run.marker, "no task attempt failed"
    assert_table_exactly_once(table, checkpoint)
    record = CommitLog(Checkpoint.resolve(str(checkpoint))).read(CRASH_BATCH)
    assert record is not None and {item["attempt"] for item in record.prepared} == {1}


# --- unaligned barriers, the final checkpoint -----------------------------------------------------


# The barrier, the spill and the final checkpoint are the sink's, above the participant: one
# format runs them (each format's commit of a batch runs in every test here)
@pytest.mark.parametrize("fmt", ["iceberg"])
def test_slow_table_writes_spill_and_the_final_checkpoint_commits_the_rest(
    fmt: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Partition 0's rows reach the sink slowly: unaligned barriers cut at 0.5 s and spill
    the rest as channel state, which the next batch writes first; the bounded query's
    (``endingOffsets=latest``, availableNow) last batch is the final checkpoint and commits
    everything left."""
    table = TableUnderTest.make(fmt, tmp_path)
    checkpoint = tmp_path / "checkpoint"
    config = table_config(
        kafka,
        input_topic(kafka, new_topic),
        checkpoint,
        table,
        alignedCheckpointTimeout="500ms",
        chunkRows="10",
    )
    config.update(slow_partition=0, slow_ms_per_row=20, source_options={"endingOffsets": "latest"})
    finish(config, tmp_path)
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    decided = log.decided_batch_ids()
    assert any(r.channel_state for r in log.records(decided)), "no barrier spilled rows"
    assert (checkpoint / "unaligned" / "finished.json").exists(), "no final checkpoint"
    assert_table_exactly_once(table, checkpoint, batches=len(decided))


# --- other writers, other queries, another schema -------------------------------------------------


def _append_elsewhere(table: TableUnderTest, stop: threading.Event, appended: list[int]) -> None:
    """Another application appending one row at a time until ``stop``."""
    import pyarrow as pa

    while not stop.wait(0.05):
        if not table.exists():
            continue
        row = pa.table(
            {
                "key": pa.array([b"other"]),
                "value": pa.array([f"other:{len(appended)}".encode()]),
                "partition": pa.array([-1], pa.int32()),
                "offset": pa.array([len(appended)], pa.int64()),
            }
        )
        if table.format == "delta":
            from deltalake import write_deltalake

            target = table.delta()
            write_deltalake(target, row.cast(pa.schema(target.schema().to_arrow())), mode="append")
        else:
            from pyiceberg.io.pyarrow import schema_to_pyarrow

            iceberg = table.iceberg()
            iceberg.append(row.cast(schema_to_pyarrow(iceberg.schema(), include_field_ids=False)))
        appended.append(1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_concurrent_appender_makes_commits_retry_not_fail_or_duplicate(
    fmt: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    table = TableUnderTest.make(fmt, tmp_path)
    checkpoint = tmp_path / "checkpoint"
    config = table_config(kafka, input_topic(kafka, new_topic), checkpoint, table)
    stop, appended = threading.Event(), []
    appender = threading.Thread(target=_append_elsewhere, args=(table, stop, appended))
    appender.start()
    try:
        finish(config, tmp_path)
    finally:
        stop.set()
        appender.join()
    assert appended, "the other application appended nothing while the query ran"
    got = table.values_by_partition()
    assert len(got.pop(-1)) == len(appended)
    assert_table_exactly_once(table, checkpoint)


def test_two_queries_into_one_table_each_commit_their_batches_once(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """Two queries (two checkpoints) append the same input to one Iceberg table at once."""
    table = TableUnderTest.make("iceberg", tmp_path)
    topic = input_topic(kafka, new_topic)
    checkpoints = [tmp_path / "checkpoint-a", tmp_path / "checkpoint-b"]
    configs = [table_config(kafka, topic, c, table) for c in checkpoints]
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(finish, config, tmp_path) for config in configs]
        for run in runs:
            run.result()
    for checkpoint in checkpoints:
        assert_table_exactly_once(table, checkpoint, copies=2)


def test_a_table_whose_schema_does_not_fit_is_refused_before_data_moves(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    """The planner's refusal stops the query before any task runs (each format's refusal is
    unit-tested against a real table: tests/sink/tables/test_table_participant.py)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = TableUnderTest.make("delta", tmp_path)
    schema = pa.schema([("key", pa.binary()), ("value", pa.string()), ("partition", pa.int32())])
    DeltaTable.create(str(table.root), schema=schema)
    checkpoint = tmp_path / "checkpoint"
    config = table_config(kafka, input_topic(kafka, new_topic), checkpoint, table)
    run = run_query(config, tmp_path, None)
    assert run.returncode != 0
    assert "value (binary into string)" in run.stderr and "offset" in run.stderr, tail(run)
    assert table.read().num_rows == 0 and table.files_on_disk() == set()
