"""Queries that ride through lost brokers on a real three-node Kafka cluster (KRaft, replication
3, min.insync.replicas 2): every record once, no open transaction, and the query never fails.

One cluster for the module (:func:`cluster`); the queries run in the shared Spark session
(``local[2]``: no task retries, so any failure fails the query). Faults come from
``broker_chaos.py``:

- each broker in turn killed (SIGKILL) for 8 s, then one frozen (SIGSTOP) for 30 s, under a
  Kafka -> Kafka query and a Kafka -> files query reading the same input;
- a rolling restart: each broker stopped (controlled shutdown) and started again in turn;
- a lagging follower named by a read task's stale metadata (read tasks, no Spark);
- the transaction coordinator's broker killed after a batch was decided and before its commit
  (a hard kill at the named crash point): the restart commits on the new coordinator.

The cluster's ``replica.lag.time.max.ms`` is 5 s (Kafka's default: 30 s) so that a frozen
follower leaves the in-sync replicas within the lagging-follower test's time; nothing else
differs from Kafka's defaults (a killed broker is fenced after ``broker.session.timeout.ms``,
9 s).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker_chaos import (
    Chaos,
    Fault,
    batch_durations_ms,
    input_stream,
    run_until_caught_up,
    to_kafka,
)
from crash_runs import crash, finish, sink_prefix
from harness import committed_values, kcat_read_committed, wait_until
from unaligned.kafka.clients.client_options import client_config_from_options
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.kafka.transactions import transaction_states
from unaligned.source.partition_reader import KafkaInputPartition, read_partition
from unaligned.source.planning.offset_ranges import OffsetRange
from unaligned.testing import EmbeddedKafka

pytestmark = [pytest.mark.slow, pytest.mark.alone]

logger = logging.getLogger(__name__)

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(
        brokers=3,
        data_dir=tmp_path_factory.mktemp("cluster"),
        broker_properties={"replica.lag.time.max.ms": "5000"},
    ) as kafka:
        yield kafka


def _topic(kafka: EmbeddedKafka, partitions: int = PARTITIONS) -> str:
    name = f"f-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, partitions=partitions)
    return name


def _values(partition: int, count: int) -> list[bytes]:
    return [f"{partition}:{i:06d}".encode() for i in range(count)]


def _input(kafka: EmbeddedKafka, per_partition: int) -> str:
    topic = _topic(kafka)
    kafka.produce(
        topic,
        ((p, v, v, None, None) for p in range(PARTITIONS) for v in _values(p, per_partition)),
    )
    return topic


def _assert_kafka_output_once(
    kafka: EmbeddedKafka, output: str, checkpoint: Path, per_partition: int
) -> None:
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "last stable offset == end offset on every output partition",
        timeout_s=60,
    )
    servers = {"bootstrap_servers": kafka.bootstrap_servers}
    wait_until(
        lambda: transaction_states.list_transactional_ids(servers, sink_prefix(checkpoint)) == [],
        "no open transaction of the sink",
        timeout_s=60,
    )
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kcat_read_committed(kafka.bootstrap_servers, output):  # librdkafka
        got[record["partition"]].append(record["value"].encode())
    for p in range(PARTITIONS):
        assert got[p] == _values(p, per_partition), (
            f"output partition {p}: {len(got[p])} records ({len(set(got[p]))} distinct), "
            f"expected {per_partition} once, in order"
        )


def _report(name: str, queries: dict[str, Any], chaos: Chaos) -> None:
    """The figures of the run, for the log and the issue's table."""
    for label, query in queries.items():
        durations = batch_durations_ms(query)
        logger.warning(
            "%s %s: faults %s; batches %d, longest %d ms, median %d ms",
            name,
            label,
            [(s.fault.action, s.node, round(s.back_s - s.at_s, 1)) for s in chaos.struck],
            len(durations),
            max(durations or [0]),
            sorted(durations or [0])[len(durations or [0]) // 2],
        )


def test_kafka_and_file_sinks_ride_through_each_broker_killed_and_one_frozen(
    spark: SparkSession, cluster: EmbeddedKafka, tmp_path: Path
) -> None:
    per_partition = 3_000
    source = _input(cluster, per_partition)
    output = _topic(cluster)
    df = input_stream(spark, cluster, source, per_trigger=400)
    kafka_checkpoint, file_checkpoint = tmp_path / "kafka-cp", tmp_path / "file-cp"
    files = tmp_path / "files"
    kafka_query = to_kafka(df, cluster, output, kafka_checkpoint)
    to_files = (
        df.writeStream.format("unaligned")
        .option("path", str(files))
        .option("checkpointLocation", str(file_checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    kill = [Fault(str(node), "kill", down_s=8.0) for node in (1, 2, 3)]
    freeze = [Fault(f"leader:{source}:0", "freeze", down_s=30.0)]
    chaos = Chaos(cluster, [*kill, *freeze]).start()
    try:
        run_until_caught_up(
            [kafka_query, to_files],
            [kafka_checkpoint, file_checkpoint],
            source,
            dict.fromkeys(range(PARTITIONS), per_partition),
            chaos,
            timeout_s=420,
        )
        struck = chaos.join()
        _report("kill+freeze", {"kafka": kafka_query, "files": to_files}, chaos)
    finally:
        kafka_query.stop()
        to_files.stop()
    assert {s.node for s in struck if s.fault.action == "kill"} == {1, 2, 3}
    _assert_kafka_output_once(cluster, output, kafka_checkpoint, per_partition)
    written = committed_values(files)
    for p in range(PARTITIONS):
        assert written.get(p, []) == _values(p, per_partition), f"file sink, partition {p}"


def test_a_rolling_restart_of_every_broker_costs_no_failed_batch(
    spark: SparkSession, cluster: EmbeddedKafka, tmp_path: Path
) -> None:
    per_partition = 2_000
    source = _input(cluster, per_partition)
    output = _topic(cluster)
    checkpoint = tmp_path / "cp"
    query = to_kafka(
        input_stream(spark, cluster, source, per_trigger=300), cluster, output, checkpoint
    )
    rolling = [
        Fault(str(node), "stop", down_s=3.0, pause_s=2.0, wait_replicated=(source, output))
        for node in (1, 2, 3)
    ]
    chaos = Chaos(cluster, rolling).start()
    try:
        run_until_caught_up(
            [query],
            [checkpoint],
            source,
            dict.fromkeys(range(PARTITIONS), per_partition),
            chaos,
            timeout_s=300,
        )
        chaos.join()
        _report("rolling restart", {"kafka": query}, chaos)
    finally:
        query.stop()
    _assert_kafka_output_once(cluster, output, checkpoint, per_partition)


def test_a_read_task_with_stale_metadata_never_reads_a_lagging_follower_as_data_loss(
    cluster: EmbeddedKafka,
) -> None:
    """A read task's kept metadata names broker L as the leader; L lost the leadership, came
    back as a follower and lags behind (replication throttled). The task must read every record
    from the real leader: no false DataLossError, no record skipped, whatever failOnDataLoss."""
    topic = _topic(cluster, partitions=1)
    tp = TopicPartitionId(topic, 0)
    first = [f"a{i:04d}".encode() for i in range(200)]
    cluster.produce(topic, ((0, v, v, None, None) for v in first))
    configs = {
        fail: client_config_from_options(
            {"bootstrap.servers": cluster.bootstrap_servers, "client.id": f"stale-{fail}"}
        )
        for fail in (True, False)
    }

    def read(fail: bool, start: int, end: int) -> list[bytes]:
        part = KafkaInputPartition(
            0, (OffsetRange(tp, start, end),), configs[fail], False, fail, 60_000
        )
        return [v for b in read_partition(part) for v in b.column("value").to_pylist()]

    for fail in (True, False):  # each kept client learns that L leads, at its epoch
        assert read(fail, 0, 200) == first
    old_leader = cluster.leader(topic, 0)
    node = cluster.node(old_leader)
    _throttle_replication(cluster, topic, old_leader)  # set while L runs: it keeps its own rate
    node.stop()  # the leadership moves to an in-sync follower
    wait_until(lambda: cluster.leader(topic, 0) not in (-1, old_leader), "a new leader")
    # 5 MB that L has not got, replicated to it at 20 KB/s at most (after a first fetch of at
    # most 1 MB): it lags for minutes
    second = [f"b{i:04d}-".encode().ljust(1000, b"x") for i in range(5_000)]
    cluster.produce(topic, ((0, None, v, None, None) for v in second))
    node.restart()  # back as a follower that cannot catch up
    time.sleep(2)
    assert old_leader not in cluster.in_sync_replicas(topic, 0), "harness: L caught up"
    try:
        for fail in (True, False):
            assert read(fail, 200, 5_200) == second, f"failOnDataLoss={fail}"
    finally:
        _throttle_replication(cluster, topic, None)
        cluster.wait_fully_replicated(topic)


def _throttle_replication(kafka: EmbeddedKafka, topic: str, follower: int | None) -> None:
    """Throttle the replication of ``topic``'s partition 0 to ``follower`` to 20 KB/s, leader
    and follower side (``None``: lift it). Every broker's rates are set while it runs (a dynamic
    broker setting stays in the cluster's metadata across a restart)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    try:
        rate = "20480" if follower is not None else "9223372036854775807"
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.BROKER,
                    str(node.node_id),
                    configs={
                        "leader.replication.throttled.rate": rate,
                        "follower.replication.throttled.rate": rate,
                    },
                )
                for node in kafka.nodes
                if node.running
            ],
            raise_on_unknown=False,  # dynamic broker settings kafka-python does not list
        )
        # follower side: the follower's own fetches, once it has applied its rate at its
        # restart; leader side: every replica serving partition 0, which only throttles replicas
        # out of the ISR (Kafka's shouldLeaderThrottle), so whichever broker leads holds the
        # follower back from the start and the in-sync follower keeps up
        kafka.set_topic_config(
            topic,
            {
                "follower.replication.throttled.replicas": (
                    f"0:{follower}" if follower is not None else ""
                ),
                "leader.replication.throttled.replicas": "*" if follower is not None else "",
            },
        )
    finally:
        admin.close()


def test_the_coordinator_lost_between_decision_and_commit_commits_on_the_new_one(
    cluster: EmbeddedKafka, tmp_path: Path
) -> None:
    """A hard kill after batch 1's commit record (decided, nothing committed), then the broker
    coordinating its transactions killed too: the restarted query commits the decided batch on
    the coordinator that took over, exactly once."""
    per_partition = 150
    source = _input(cluster, per_partition)
    output = _topic(cluster)
    checkpoint = tmp_path / "cp"
    config = {
        "bootstrap": cluster.bootstrap_servers,
        "input_topic": source,
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "max_offsets": 200,
    }
    crash(config, tmp_path, "driver_after_commit_record@1")
    record = json.loads((checkpoint / "unaligned" / "commits" / "1.json").read_text())
    ids = [item["transactionalId"] for item in record["prepared"] if item["recordCount"]]
    assert ids, "harness: batch 1 prepared no transaction"
    coordinator = cluster.transaction_coordinator(ids[0])
    node = cluster.node(coordinator)
    node.kill()
    try:
        finish(config, tmp_path)
    finally:
        node.restart()
    _assert_kafka_output_once(cluster, output, checkpoint, per_partition)
