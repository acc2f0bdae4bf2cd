"""A cluster that authorizes every request (Kafka's StandardAuthorizer, no ACL: no access), and
principals with exactly the ACLs docs/guides/acls.md lists for each use.

One broker for the module (SASL_SSL SCRAM-SHA-512 users, two-phase commit enabled, no
principal but the test kit's with any Cluster ACL):

- a query per sink mode (exactly-once with and without two-phase commit, at-least-once), read
  by a source principal with Topic Read and Describe only (and Group Read with a consumer
  group), writes every record once; none of them has a Cluster ACL, so the planner's
  DescribeConfigs is refused: Kafka's default is assumed, with one warning per process;
- without TransactionalId ACLs the sink refuses to start naming TransactionalId Describe and
  the ``kafka-acls`` command; without TwoPhaseCommit ``auto`` falls back (said once) and runs
  exactly once, ``true`` refuses naming the ACL;
- a topic the principal may not describe is called that, not "no such topic"; one it may not
  write is refused naming Topic Write.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from harness import kcat_read_committed, wait_until
from secured_cluster import jaas
from unaligned.errors import KafkaAuthorizationError, TopicNotFoundError
from unaligned.kafka.clients.producer_options import TWO_PHASE_COMMIT_KWARG
from unaligned.kafka.transactions import transactional_probe
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_participant import KafkaParticipant
from unaligned.testing import EmbeddedKafka
from unaligned.testing.broker_config import TWO_PHASE_COMMIT
from unaligned.testing.secured_listeners import BrokerSecurity
from unaligned.testing.tls_material import TlsMaterial, make_tls_material

pytestmark = pytest.mark.slow

PASSWORD = "acl-Pw-3c1d"
IN, OUT, GROUP = "acl-in-", "acl-out-", "acl-group-"
#: principal -> its ACLs: (resource type, name, prefixed, operations), as docs/guides/acls.md.
PRINCIPALS: dict[str, list[tuple[str, str, bool, list[str]]]] = {
    "reader": [("TOPIC", IN, True, ["READ", "DESCRIBE"])],
    "grouped": [("TOPIC", IN, True, ["READ", "DESCRIBE"]), ("GROUP", GROUP, True, ["READ"])],
    "eos": [
        ("TOPIC", OUT, True, ["WRITE", "DESCRIBE"]),
        ("TRANSACTIONAL_ID", "acl-eos-", True, ["WRITE", "DESCRIBE"]),
    ],
    "eos2pc": [
        ("TOPIC", OUT, True, ["WRITE", "DESCRIBE"]),
        ("TRANSACTIONAL_ID", "acl-2pc-", True, ["WRITE", "DESCRIBE", "TWO_PHASE_COMMIT"]),
    ],
    "alo": [("TOPIC", OUT, True, ["WRITE", "DESCRIBE"])],
}
RECORDS = 400


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmbeddedKafka, TlsMaterial]]:
    directory = tmp_path_factory.mktemp("acls")
    tls = make_tls_material(directory / "tls", "store-Pw-1", "key-Pw-1")
    security = BrokerSecurity(tls, dict.fromkeys(PRINCIPALS, PASSWORD), acls=True)
    with EmbeddedKafka(
        data_dir=directory / "kafka", broker_properties=TWO_PHASE_COMMIT, security=security
    ) as kafka:
        for user, acls in PRINCIPALS.items():
            for resource_type, name, prefixed, operations in acls:
                kafka.allow(f"User:{user}", resource_type, name, operations, prefixed=prefixed)
        yield kafka, tls


def _login(cluster: tuple[EmbeddedKafka, TlsMaterial], user: str) -> dict[str, str]:
    kafka, tls = cluster
    return {
        "kafka.bootstrap.servers": kafka.listener_bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.location": str(tls.ca_pem),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas("ScramLoginModule", username=user, password=PASSWORD),
    }


def _topics(kafka: EmbeddedKafka) -> tuple[str, str]:
    source, output = f"{IN}{uuid.uuid4().hex[:8]}", f"{OUT}{uuid.uuid4().hex[:8]}"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(output, partitions=2)
    kafka.produce(source, [(i % 2, None, f"v{i:04d}".encode(), None, None) for i in range(RECORDS)])
    return source, output


def _run(
    spark: Any, source_options: dict[str, str], sink_options: dict[str, str], checkpoint: Path
) -> None:
    reader = spark.readStream.format("unaligned").option("startingOffsets", "earliest")
    for key, value in source_options.items():
        reader = reader.option(key, value)
    writer = (
        reader.option("maxOffsetsPerTrigger", "150")
        .load()
        .selectExpr("value")
        .writeStream.format("unaligned")
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(240), "the query did not finish"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()


def _assert_each_record_once(kafka: EmbeddedKafka, output: str) -> None:
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "every transaction of the sink ended",
    )
    got = sorted(r["value"] for r in kcat_read_committed(kafka.bootstrap_servers, output))
    assert got == [f"v{i:04d}" for i in range(RECORDS)]


@pytest.mark.parametrize(
    "reader, sink, options",
    [
        ("reader", "eos2pc", {"kafka.transaction.two.phase.commit.enable": "true"}),
        ("grouped", "eos", {"kafka.transaction.two.phase.commit.enable": "false"}),
        ("reader", "eos", {}),  # auto, without TwoPhaseCommit: falls back
        ("reader", "alo", {"deliveryGuarantee": "at-least-once"}),
    ],
    ids=["exactly-once-two-phase", "exactly-once-with-a-group", "auto-falls-back", "at-least-once"],
)
def test_each_mode_runs_with_exactly_the_documented_acls(
    spark: Any,
    cluster: tuple[EmbeddedKafka, TlsMaterial],
    reader: str,
    sink: str,
    options: dict[str, str],
    tmp_path: Path,
) -> None:
    kafka = cluster[0]
    source, output = _topics(kafka)
    source_options = {"subscribe": source, **_login(cluster, reader)}
    if reader == "grouped":
        source_options["groupIdPrefix"] = f"{GROUP}{uuid.uuid4().hex[:6]}"
    sink_options = {"topic": output, **_login(cluster, sink), **options}
    prefix = {"eos": "acl-eos-", "eos2pc": "acl-2pc-"}.get(sink)
    if prefix is not None:  # the at-least-once sink has no transactional ids
        sink_options["transactionalIdPrefix"] = f"{prefix}{uuid.uuid4().hex[:8]}"
    _run(spark, source_options, sink_options, tmp_path / "checkpoint")
    _assert_each_record_once(kafka, output)
    if reader == "grouped":  # a refused group commit is only logged: check it landed
        assert _group_committed(kafka, source_options["groupIdPrefix"]) > 0


def _group_committed(kafka: EmbeddedKafka, prefix: str) -> int:
    """Offsets committed to the source's group ``<prefix>-<token>`` (read as the super user)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    try:
        names = [str(g["group_id"]) for g in admin.list_groups()]
        groups = [name for name in names if name.startswith(f"{prefix}-")]
        assert len(groups) == 1, names
        offsets = admin.list_group_offsets({groups[0]: None})[groups[0]]
        return sum(int(o.offset) for o in offsets.values())
    finally:
        admin.close()


def _participant(
    cluster: tuple[EmbeddedKafka, TlsMaterial], user: str, prefix: str, tmp_path: Path, **extra: str
) -> KafkaParticipant:
    kafka = cluster[0]
    topic = extra.pop("topic", None)
    if topic is None:
        topic = f"{OUT}{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=1)
    target = SinkOptions.parse(
        {"checkpointLocation": str(tmp_path), "topic": topic, **_login(cluster, user), **extra}
    ).target
    assert isinstance(target, KafkaTarget)
    schema = StructType([StructField("value", BinaryType())])
    return KafkaParticipant(
        target, kafka_columns(schema, target), f"{prefix}{uuid.uuid4().hex[:8]}"
    )


def test_without_any_cluster_acl_the_default_is_assumed_with_one_warning(
    cluster: tuple[EmbeddedKafka, TlsMaterial], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="unaligned.sink.topics.kafka_checks"):
        for run in ("a", "b"):  # two planners' checks in one process
            participant = _participant(cluster, "eos2pc", "acl-2pc-", tmp_path / run)
            participant.check_at_query_start()
            assert participant.client_kwargs().get(TWO_PHASE_COMMIT_KWARG) is True
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "refused DescribeConfigs" in warned[0] and "900000" in warned[0], warned[0]
    assert "--operation DescribeConfigs --cluster" in warned[0], warned[0]
    # a restarted query's planner probes again: plain after two-phase and back, on the same id
    kwargs = participant.client_kwargs()
    tid = transactional_probe.probe_id(participant.id_stem)
    for two_phase_commit in (False, True, False):
        transactional_probe.probe(kwargs, tid, 60_000, two_phase_commit)


def test_without_transactional_id_acls_the_sink_names_them(
    cluster: tuple[EmbeddedKafka, TlsMaterial], tmp_path: Path
) -> None:
    participant = _participant(cluster, "alo", "acl-eos-", tmp_path)
    with pytest.raises(KafkaAuthorizationError) as refused:
        participant.check_at_query_start()
    text = str(refused.value)
    assert "refused FindCoordinator" in text and "lacks Describe on TransactionalId" in text, text
    prefix = participant.id_stem
    assert (
        f"--allow-principal User:alo --operation Describe --transactional-id {prefix} "
        "--resource-pattern-type prefixed" in text
    ), text


def test_without_two_phase_commit_acl_auto_falls_back_once_and_true_refuses(
    cluster: tuple[EmbeddedKafka, TlsMaterial], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    auto = _participant(cluster, "eos", "acl-eos-", tmp_path / "a")
    with caplog.at_level(logging.INFO, logger="unaligned.sink.topics.kafka_checks"):
        for _ in range(2):  # the planner's checks before two batches
            auto.check_at_query_start()
            assert TWO_PHASE_COMMIT_KWARG not in auto.client_kwargs()
    said = [r.getMessage() for r in caplog.records if "is off" in r.getMessage()]
    assert len(said) == 1 and "TwoPhaseCommit on TransactionalId" in said[0], said
    required = _participant(
        cluster,
        "eos",
        "acl-eos-",
        tmp_path / "c",
        **{"kafka.transaction.two.phase.commit.enable": "true"},
    )
    with pytest.raises(KafkaAuthorizationError) as refused:
        required.check_at_query_start()
    text = str(refused.value)
    assert "'kafka.transaction.two.phase.commit.enable' = true" in text, text
    assert "InitProducerId with enable2Pc" in text and "--operation TwoPhaseCommit" in text, text


def test_a_topic_the_principal_may_not_describe_or_write_is_named_so(
    cluster: tuple[EmbeddedKafka, TlsMaterial], tmp_path: Path
) -> None:
    kafka = cluster[0]
    hidden = f"other-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(hidden, partitions=1)
    participant = _participant(cluster, "eos", "acl-eos-", tmp_path / "a", topic=hidden)
    with pytest.raises(KafkaAuthorizationError, match=f"lacks Describe on Topic '{hidden}'"):
        participant.check_at_query_start()
    read_only = f"{IN}{uuid.uuid4().hex[:8]}"
    kafka.create_topic(read_only, partitions=1)
    participant = _participant(cluster, "reader", "acl-eos-", tmp_path / "b", topic=read_only)
    with pytest.raises(KafkaAuthorizationError, match=f"lacks Write on Topic '{read_only}'"):
        participant.check_at_query_start()
    missing = _participant(cluster, "eos", "acl-eos-", tmp_path / "c", topic=f"{OUT}missing")
    with pytest.raises(TopicNotFoundError, match="no such topic"):
        missing.check_at_query_start()
