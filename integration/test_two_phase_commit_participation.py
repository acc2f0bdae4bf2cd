"""Prepared transactions that never expire (KIP-939) on Apache Kafka 4.4.0, against a broker
without them.

Two single-node brokers: ``participating``, the session's, with two-phase commit enabled
(``TWO_PHASE_COMMIT``: the broker setting and unstable API versions, which 4.4.0 needs for
``InitProducerId`` v6), and ``plain``, the module's, without, its ``transaction.max.timeout.ms``
60 s and its check for timed-out transactions every second. The sink's transaction timeout
is 10 s (60 s for the replay after ``abandon``, so a loaded machine's slow batch still has
room) and its ``kafka.transaction.two.phase.commit.enable`` is left at ``auto``:

- a driver killed after batch 1's commit record and before its commit, restarted 15 s later
  (past the timeout): with two-phase commit every record once; without, the broker aborted the
  batch's transactions and the restart stops with ``TransactionCommitError`` naming the batch
  (today's behaviour, shown side by side);
- a batch slower than the transaction timeout is decided and committed, not refused as expired;
- ``auto`` on the plain broker says why two-phase commit is off, once, and ``true`` refuses it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from crash_runs import PARTITIONS, crash, expected, finish, run_query, sink_prefix, tail
from harness import kcat_read_committed, wait_until
from unaligned.errors import SinkConfigurationError
from unaligned.kafka.clients.producer_options import TWO_PHASE_COMMIT_KWARG
from unaligned.kafka.transactions import transaction_states
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_participant import KafkaParticipant
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

SHORT_TIMEOUTS = {
    "transaction.max.timeout.ms": "60000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
SINK_OPTIONS = {"kafka.transaction.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def brokers(
    kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, EmbeddedKafka]]:
    """``participating``: the session's broker (two-phase commit on; its timeouts play no part
    in a held transaction); ``plain``: one of the module's own."""
    with EmbeddedKafka(
        data_dir=tmp_path_factory.mktemp("plain"), broker_properties=SHORT_TIMEOUTS
    ) as plain:
        yield {"participating": kafka, "plain": plain}


def _topics(kafka: EmbeddedKafka, per_partition: int = 200) -> tuple[str, str]:
    source, output = (f"p-{uuid.uuid4().hex[:10]}" for _ in range(2))
    kafka.create_topic(source, partitions=PARTITIONS)
    kafka.create_topic(output, partitions=PARTITIONS)
    kafka.produce(
        source,
        ((p, v, v, None, None) for p in range(PARTITIONS) for v in expected(p)[:per_partition]),
    )
    return source, output


def _config(kafka: EmbeddedKafka, source: str, output: str, checkpoint: Path) -> dict[str, object]:
    return {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": source,
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "max_offsets": 200,
        "extra_sink_options": SINK_OPTIONS,
    }


def _assert_exactly_once(kafka: EmbeddedKafka, output: str, checkpoint: Path) -> None:
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "last stable offset == end offset on every output partition",
    )
    servers = {"bootstrap_servers": kafka.bootstrap_servers}
    assert transaction_states.list_transactional_ids(servers, sink_prefix(checkpoint)) == []
    got: dict[int, list[bytes]] = {}
    for record in kcat_read_committed(kafka.bootstrap_servers, output):
        got.setdefault(record["partition"], []).append(record["value"].encode())
    for p in range(PARTITIONS):
        assert got.get(p, []) == expected(p), f"output partition {p}: not every record once"


@pytest.mark.parametrize("broker", ["participating", "plain"])
def test_a_restart_later_than_the_transaction_timeout(
    brokers: dict[str, EmbeddedKafka], broker: str, tmp_path: Path
) -> None:
    kafka = brokers[broker]
    source, output = _topics(kafka)
    checkpoint = tmp_path / "cp"
    config = _config(kafka, source, output, checkpoint)
    crash(config, tmp_path, "driver_after_commit_record@1")
    record = json.loads((checkpoint / "unaligned" / "commits" / "1.json").read_text())
    items = [item for item in record["prepared"] if item["recordCount"]]
    assert items and all(
        item.get("twoPhaseCommit", False) == (broker == "participating") for item in items
    )
    time.sleep(15)  # the outage: past the 10 s timeout and the broker's check after it
    servers = {"bootstrap_servers": kafka.bootstrap_servers}
    states = transaction_states.describe_transactions(
        servers, [i["transactionalId"] for i in items]
    )
    if broker == "participating":
        assert all(s is not None and s.state.value == "Ongoing" for s in states.values()), states
        finish(config, tmp_path)
        _assert_exactly_once(kafka, output, checkpoint)
        return
    assert all(s is not None and s.state.value == "CompleteAbort" for s in states.values()), states
    run = run_query(config, tmp_path, None)
    assert run.returncode != 0, f"the restart should stop; {tail(run)}"
    assert "TransactionCommitError" in run.stderr and "batch 1" in run.stderr, tail(run)
    assert "the broker aborted it when kafka.transaction.timeout.ms" in run.stderr, tail(run)
    assert "unaligned abandon" in run.stderr, tail(run)
    # inspect tells this batch from one a restart commits; abandon --replay writes it again
    (batch,) = _cli("inspect", str(checkpoint), "--json", servers=kafka)["inDoubt"]
    assert batch["outcome"].startswith("a restart cannot commit it"), batch
    assert not batch["blocksReaders"]
    _cli("abandon", str(checkpoint), "--batch", "1", "--replay", servers=kafka)
    # the replayed batch must commit, not race the 10 s timeout on a loaded machine
    finish({**config, "extra_sink_options": {"kafka.transaction.timeout.ms": "60000"}}, tmp_path)
    _assert_exactly_once(kafka, output, checkpoint)


def _cli(*args: str, servers: EmbeddedKafka) -> dict[str, object]:
    """Run ``unaligned <args> --bootstrap-servers ...``; its JSON output, if any."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "unaligned.cli",
            *args,
            "--bootstrap-servers",
            servers.bootstrap_servers,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout) if args[-1] == "--json" else {}
    return out


def test_a_batch_slower_than_the_transaction_timeout_still_commits(
    brokers: dict[str, EmbeddedKafka], tmp_path: Path
) -> None:
    kafka = brokers["participating"]
    source, output = _topics(kafka, per_partition=60)
    checkpoint = tmp_path / "cp"
    config = {
        **_config(kafka, source, output, checkpoint),
        "max_offsets": 1_000,  # one batch
        "slow_partition": 0,
        "slow_ms_per_row": 220,  # 60 rows: about 13 s, past the 10 s transaction timeout
        "extra_sink_options": {**SINK_OPTIONS, "checkpointMode": "aligned"},
    }
    run = finish(config, tmp_path)
    assert max(d["triggerExecution"] for d in run.summary()["duration_ms"]) > 10_000
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output), "markers written"
    )
    got = sorted(r["value"].encode() for r in kcat_read_committed(kafka.bootstrap_servers, output))
    assert got == sorted(v for p in range(PARTITIONS) for v in expected(p)[:60])


def _participant(kafka: EmbeddedKafka, tmp_path: Path, **extra: str) -> KafkaParticipant:
    from pyspark.sql.types import BinaryType, StructField, StructType

    topic = f"p-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=1)
    target = SinkOptions.parse(
        {
            "checkpointLocation": str(tmp_path),
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "topic": topic,
            **SINK_OPTIONS,
            **extra,
        }
    ).target
    assert isinstance(target, KafkaTarget)
    schema = StructType([StructField("value", BinaryType())])
    return KafkaParticipant(target, kafka_columns(schema, target), f"pc-{uuid.uuid4().hex[:8]}")


def test_auto_follows_the_brokers_and_true_refuses_a_cluster_without_it(
    brokers: dict[str, EmbeddedKafka], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    on = _participant(brokers["participating"], tmp_path / "a")
    on.check_at_query_start()
    assert on.client_kwargs().get(TWO_PHASE_COMMIT_KWARG) is True
    off = _participant(brokers["plain"], tmp_path / "b")
    with caplog.at_level(logging.INFO, logger="unaligned.sink.topics.kafka_checks"):
        off.check_at_query_start()
        off.check_at_query_start()  # the next batch: said once
    assert TWO_PHASE_COMMIT_KWARG not in off.client_kwargs()
    said = [r.getMessage() for r in caplog.records if "two-phase commit" in r.getMessage()]
    assert len(said) == 1 and "transaction.two.phase.commit.enable=false" in said[0], said
    required = _participant(
        brokers["plain"], tmp_path / "c", **{"kafka.transaction.two.phase.commit.enable": "true"}
    )
    with pytest.raises(SinkConfigurationError, match="InitProducerId up to v5"):
        required.check_at_query_start()
    forced_off = _participant(
        brokers["participating"],
        tmp_path / "d",
        **{"kafka.transaction.two.phase.commit.enable": "false"},
    )
    forced_off.check_at_query_start()
    assert TWO_PHASE_COMMIT_KWARG not in forced_off.client_kwargs()
