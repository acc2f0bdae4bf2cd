"""Queries that share a ``transactionalIdPrefix`` (or whose prefixes overlap, ``X`` and ``X-7``)
never touch each other's transactions, and an operator ends a held batch with
``unaligned abandon``.

The session's single-node Apache Kafka 4.4.0 broker, with two-phase commit (KIP-939: a
decided batch's transactions are held until a commit or an abort, the case where a fenced id
loses the most). Which ids a query lists, fences and cleans up is the same code with two-phase
commit off, so one broker covers both:

- a query crashed after batch 1's commit record (its transactions held) while a second query
  with the same prefix, then a third with prefix ``X-7``, run to their end (their recoveries and
  clean-ups list every open id under their prefixes); the first query restarted: every output
  exactly once;
- ``X`` and ``X-7`` side by side for 25 batches each: both exactly once;
- a held batch ended by ``unaligned abandon`` with each choice: read_committed readers move
  again at once, and the restart does what the choice promised.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from crash_runs import PARTITIONS, PER_PARTITION, crash, expected, finish, run_query, tail
from harness import wait_until
from unaligned.barriers.offset_log import read_offset_log
from unaligned.checkpoint import Checkpoint
from unaligned.kafka.transactions import transaction_states
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

BATCHES = 25


def _query(
    kafka: EmbeddedKafka, tmp_path: Path, name: str, prefix: str, **extra: Any
) -> dict[str, Any]:
    """A query of its own (input, output, checkpoint) with ``transactionalIdPrefix`` ``prefix``."""
    source, output = (f"{name}-{uuid.uuid4().hex[:8]}" for _ in range(2))
    kafka.create_topic(source, partitions=PARTITIONS)
    kafka.create_topic(output, partitions=PARTITIONS)
    kafka.produce(source, ((p, v, v, None, None) for p in range(PARTITIONS) for v in expected(p)))
    (tmp_path / name).mkdir()
    return {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": source,
        "output_topic": output,
        "checkpoint": str(tmp_path / name / "cp"),
        "max_offsets": 200,
        "extra_sink_options": {"transactionalIdPrefix": prefix},
        **extra,
    }


def _output(kafka: EmbeddedKafka, config: dict[str, Any]) -> dict[int, list[bytes]]:
    topic = config["output_topic"]
    wait_until(
        lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic),
        f"no open transaction on {topic}",
    )
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(topic, read_committed=True):
        got[record.partition].append(record.value)
    return got


def _assert_exactly_once(kafka: EmbeddedKafka, config: dict[str, Any]) -> None:
    got = _output(kafka, config)
    for p in range(PARTITIONS):
        assert got.get(p, []) == expected(p), f"{config['output_topic']} partition {p}"


def _held(kafka: EmbeddedKafka, config: dict[str, Any]) -> bool:
    topic = config["output_topic"]
    lso, end = kafka.last_stable_offsets(topic), kafka.end_offsets(topic)
    return any(lso[p] < end[p] for p in end)


def test_queries_sharing_a_prefix_or_overlapping_ones_never_fence_each_other(
    kafka: EmbeddedKafka, tmp_path: Path
) -> None:
    prefix = f"orders{uuid.uuid4().hex[:6]}"
    first = _query(kafka, tmp_path, "first", prefix)
    crash(first, tmp_path / "first", "driver_after_commit_record@1")
    assert _held(kafka, first), "batch 1's transactions should be open"
    same = _query(kafka, tmp_path, "same", prefix)
    overlapping = _query(kafka, tmp_path, "seven", f"{prefix}-7")
    run = finish(same, tmp_path / "same")
    assert "are not this query's" in run.stderr, tail(run)  # the first query's ids, named
    finish(overlapping, tmp_path / "seven")
    finish(first, tmp_path / "first")
    for config in (first, same, overlapping):
        _assert_exactly_once(kafka, config)


def test_x_and_x_7_side_by_side_for_many_batches(kafka: EmbeddedKafka, tmp_path: Path) -> None:
    """Every batch's clean-up lists the open ids under its prefix while the other query has
    transactions open: ``X``'s must never take ``X-7``'s for leftovers of its own."""
    prefix = f"pay{uuid.uuid4().hex[:6]}"
    per_batch = PARTITIONS * PER_PARTITION // BATCHES
    configs = [
        _query(kafka, tmp_path, name, p, max_offsets=per_batch)
        for name, p in (("x", prefix), ("x7", f"{prefix}-7"))
    ]
    with ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(
                lambda c: run_query(c, tmp_path / Path(c["checkpoint"]).parent.name, None), configs
            )
        )
    for config, run in zip(configs, runs, strict=True):
        assert run.returncode == 0, tail(run)
        assert len(list((Path(config["checkpoint"]) / "commits").iterdir())) >= BATCHES
        _assert_exactly_once(kafka, config)


def _abandon(
    kafka: EmbeddedKafka, config: dict[str, Any], batch: int, *choice: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "unaligned.cli",
            "abandon",
            config["checkpoint"],
            "--batch",
            str(batch),
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            *choice,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _inspect(kafka: EmbeddedKafka, config: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "unaligned.cli",
            "inspect",
            config["checkpoint"],
            "--json",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _batch_range(checkpoint: str, batch: int) -> dict[int, tuple[int, int]]:
    """Input offsets ``[start, end)`` per partition that batch ``batch`` read."""
    cp = Checkpoint.resolve(checkpoint)

    def positions(b: int) -> dict[int, int]:
        (logged,) = read_offset_log(cp, b).sources
        offset = KafkaSourceOffset.from_json(logged.offset, f"batch {b}")
        return {tp.partition: n for tp, n in offset.positions.items()}

    start, end = positions(batch - 1), positions(batch)
    return {p: (start[p], end[p]) for p in end}


@pytest.mark.parametrize("choice", ["commit", "replay", "skip"])
def test_an_operator_ends_a_held_batch(kafka: EmbeddedKafka, choice: str, tmp_path: Path) -> None:
    config = _query(kafka, tmp_path, "held", f"held{uuid.uuid4().hex[:6]}")
    crash(config, tmp_path / "held", "driver_after_commit_record@1")
    assert _held(kafka, config), "two-phase commit holds batch 1's transactions"
    (batch,) = _inspect(kafka, config)["inDoubt"]
    assert batch["batchId"] == 1 and batch["blocksReaders"] is True
    assert "a restart commits it" in batch["outcome"]
    ended = _abandon(kafka, config, 1, f"--{choice}")
    assert ended.returncode == 0, ended.stderr
    # the abort's markers land per partition just after EndTxn is answered
    wait_until(lambda: not _held(kafka, config), "readers move on once the batch is ended")
    assert _inspect(kafka, config)["inDoubt"] == []
    skipped = _batch_range(config["checkpoint"], 1) if choice == "skip" else {}
    finish(config, tmp_path / "held")
    got = _output(kafka, config)
    for p in range(PARTITIONS):
        start, end = skipped.get(p, (0, 0))
        assert got.get(p, []) == expected(p)[:start] + expected(p)[end:], f"partition {p}"
    ids = transaction_states.list_transactional_ids(
        {"bootstrap_servers": kafka.bootstrap_servers},
        config["extra_sink_options"]["transactionalIdPrefix"],
    )
    assert ids == []
