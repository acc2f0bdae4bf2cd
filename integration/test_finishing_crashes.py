"""Hard kills while a query finishes (issue 9), then a restart: exactly once, nothing open.

The crash tests' standard input (:mod:`crash_runs`: 4 partitions of 200 records) is read with
``maxOffsetsPerTrigger=300`` under a processing-time trigger by ``query_runner.py``:

- bounded input (``endingOffsets=latest``): batches 0, 1 and 2, where batch 2 carries
  EndOfData and is the final checkpoint; the run waits in ``unaligned.await_finished``. Killed
  after EndOfData was logged (a task of batch 2 pre-committed; Kafka sink) and after the final
  commit record (file sink; the Kafka sink's roll-forward of a decided batch is the crash
  matrix's);
- unbounded input stopped with ``unaligned.stop(drain=True)``, killed right after the source
  honoured the drain and before Spark logged the frozen end: the restart honours the drain
  again and finishes; records produced after it are read by a run without an end.

Each restart finishes with the final checkpoint; a further restart of a finished bounded query
plans no batch and writes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from crash_runs import (
    PARTITIONS,
    TopicFactory,
    assert_files_exactly_once,
    assert_kafka_exactly_once,
    crash,
    expected,
    finish,
    input_topic,
)
from unaligned.barriers.barrier import end_of_data
from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.final_checkpoint import finished_batch, has_finished
from unaligned.finishing.stop_request import read_request
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

MAX_OFFSETS = 300
FINAL_BATCH = 2  # 800 records, 300 per batch


def finishing_config(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path, sink: str
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": input_topic(kafka, new_topic),
        "checkpoint": str(tmp_path / "checkpoint"),
        "max_offsets": MAX_OFFSETS,
        "trigger": "1 second",
        "until": "finished",
        "source_options": {"endingOffsets": "latest"},
    }
    if sink == "kafka":
        config["output_topic"] = new_topic(partitions=PARTITIONS)
    else:
        config["output_path"] = str(tmp_path / "out")
    return config


def assert_exactly_once(kafka: EmbeddedKafka, config: dict[str, Any]) -> None:
    checkpoint = Path(config["checkpoint"])
    if "output_topic" in config:
        assert_kafka_exactly_once(kafka, config["output_topic"], checkpoint)
    else:
        assert_files_exactly_once(Path(config["output_path"]), checkpoint)


def assert_a_restart_ends_at_once(
    kafka: EmbeddedKafka, config: dict[str, Any], tmp_path: Path
) -> None:
    checkpoint = config["checkpoint"]
    last = Checkpoint.resolve(checkpoint).last_logged_batch()
    written = kafka.end_offsets(config["output_topic"]) if "output_topic" in config else None
    run = finish(config, tmp_path)
    assert Checkpoint.resolve(checkpoint).last_logged_batch() == last, (
        "a finished query planned a batch"
    )
    assert has_finished(Checkpoint.resolve(checkpoint))
    rows = run.summary()["rows"]
    assert rows and all(n == 0 for n in rows)  # idle triggers only
    if written is not None:
        assert kafka.end_offsets(config["output_topic"]) == written, "it wrote something"


@pytest.mark.parametrize(
    "point, sink",
    [
        ("task_after_precommit", "kafka"),  # EndOfData logged, the final checkpoint underway
        ("driver_after_commit_record", "files"),  # the final decision durable, not committed
    ],
)
def test_a_kill_during_the_final_checkpoint(
    point: str, sink: str, kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    config = finishing_config(kafka, new_topic, tmp_path, sink)
    crash(config, tmp_path, f"{point}@{FINAL_BATCH}")
    logged = read_offset_log(Checkpoint.resolve(config["checkpoint"]), FINAL_BATCH)
    assert end_of_data([s.offset for s in logged.sources]), "the kill was not while finishing"
    assert not has_finished(Checkpoint.resolve(config["checkpoint"]))

    finish(config, tmp_path)
    assert_exactly_once(kafka, config)
    assert finished_batch(Checkpoint.resolve(config["checkpoint"])) == FINAL_BATCH
    assert_a_restart_ends_at_once(kafka, config, tmp_path)


def test_a_kill_right_after_a_drain_was_honoured(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    config = finishing_config(kafka, new_topic, tmp_path, "kafka")
    del config["source_options"]  # unbounded: only the drain ends it
    drain = {**config, "until": "drain", "stop_after_rows": MAX_OFFSETS}
    crash(drain, tmp_path, "drain_honoured")
    request = read_request(Checkpoint.resolve(config["checkpoint"]))
    assert request is not None and request.honoured_by is not None
    assert request.completed_batch is None

    finish(config, tmp_path)  # honours the drain again, finishes, await_finished returns
    assert_exactly_once(kafka, config)
    final = finished_batch(Checkpoint.resolve(config["checkpoint"]))
    completed = read_request(Checkpoint.resolve(config["checkpoint"]))
    assert completed is not None and completed.completed_batch == final

    # Produced after the drain: a run without an end reads them, exactly once.
    later = {p: [f"{p}:{i:04d}".encode() for i in range(200, 250)] for p in range(PARTITIONS)}
    kafka.produce(config["input_topic"], ((p, v, v, None, None) for p in later for v in later[p]))
    reads_on = {k: v for k, v in config.items() if k not in ("until", "trigger")}
    finish(reads_on, tmp_path)
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(config["output_topic"], read_committed=True):
        got[record.partition].append(record.value)
    assert dict(got) == {p: expected(p) + later[p] for p in range(PARTITIONS)}
