"""The planner's cluster checks, the cluster's answers stood in for: a refused DescribeConfigs
assumes Kafka's default with one warning; the probe's refusals are worded with the sink's prefix
(PREFIXED), its INVALID_TRANSACTION_TIMEOUT names the option; two-phase commit refused to the
principal: ``auto`` falls back once (the probe asked once per process), ``true`` refuses."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import kafka.errors as kafka_errors
import pytest

from unaligned.errors import KafkaAuthorizationError, SinkConfigurationError
from unaligned.kafka.clients.authorization import TRANSACTIONAL_ID, RequestRefused, Resource
from unaligned.kafka.transactions.participation import TwoPhaseSupport
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics import kafka_checks

SCRAM = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required username='app' password='pw';"
)


def _target(tmp_path: Any, **extra: str) -> tuple[KafkaTarget, dict[str, Any]]:
    options = {
        "checkpointLocation": str(tmp_path),
        # a fresh cluster name for each test: the checks keep what they learn per process
        "kafka.bootstrap.servers": f"b-{uuid.uuid4().hex[:8]}:9092",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": SCRAM,
        **extra,
    }
    target = SinkOptions.parse(options).target
    assert isinstance(target, KafkaTarget)
    return target, target.client_kwargs()


class _Cluster:
    """What the brokers answer: DescribeConfigs refused or not, and the probe's answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, describe_configs: bool) -> None:
        self.probes: list[bool] = []
        self.refuse: dict[bool, BaseException] = {}

        def broker_max(_kwargs: Any) -> int:
            if not describe_configs:
                raise kafka_errors.ClusterAuthorizationFailedError()
            return 900_000

        def probe(_kwargs: Any, tid: str, _timeout: int, two_phase_commit: bool) -> None:
            assert tid.endswith("-probe")
            self.probes.append(two_phase_commit)
            if two_phase_commit in self.refuse:
                raise self.refuse[two_phase_commit]

        monkeypatch.setattr(
            kafka_checks.transaction_coordinator, "broker_max_transaction_timeout_ms", broker_max
        )
        monkeypatch.setattr(kafka_checks.transactional_probe, "probe", probe)
        monkeypatch.setattr(kafka_checks, "require_topic", lambda *_: None)
        monkeypatch.setattr(
            kafka_checks, "two_phase_commit_support", lambda _: TwoPhaseSupport((), unread=True)
        )


def test_a_refused_describe_configs_assumes_the_default_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = _Cluster(monkeypatch, describe_configs=False)
    target, kwargs = _target(tmp_path)
    with caplog.at_level(logging.WARNING, logger=kafka_checks.__name__):
        for _ in range(2):
            assert kafka_checks.check_cluster(target, kwargs, "orders") is True
    warned = [r.getMessage() for r in caplog.records]
    assert (
        len(warned) == 1
        and "assuming Kafka's default transaction.max.timeout.ms=900000" in (warned[0])
    )
    assert "--allow-principal User:app --operation DescribeConfigs --cluster" in warned[0]
    assert cluster.probes == [False, True]  # each probe once per process


def test_a_timeout_above_the_brokers_maximum_is_the_options_fault(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    cluster = _Cluster(monkeypatch, describe_configs=False)
    cluster.refuse[False] = kafka_errors.InvalidTransactionTimeoutError()
    target, kwargs = _target(tmp_path)
    with pytest.raises(SinkConfigurationError, match="'kafka.transaction.timeout.ms' = 900000"):
        kafka_checks.check_cluster(target, kwargs, "orders")


def test_a_refused_probe_is_worded_with_the_sinks_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    cluster = _Cluster(monkeypatch, describe_configs=True)
    resource = Resource(TRANSACTIONAL_ID, "orders-probe")
    cluster.refuse[False] = RequestRefused("InitProducerId", resource, ["Write"])
    target, kwargs = _target(tmp_path)
    with pytest.raises(KafkaAuthorizationError) as refused:
        kafka_checks.check_cluster(target, kwargs, "orders")
    assert "refused InitProducerId: principal User:app lacks Write on TransactionalId" in str(
        refused.value
    )
    assert "--transactional-id orders --resource-pattern-type prefixed" in str(refused.value)


def test_two_phase_commit_refused_auto_falls_back_once_true_refuses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = _Cluster(monkeypatch, describe_configs=True)
    resource = Resource(TRANSACTIONAL_ID, "orders-probe")
    cluster.refuse[True] = RequestRefused(
        "InitProducerId with enable2Pc", resource, ["TwoPhaseCommit"]
    )
    target, kwargs = _target(tmp_path)
    with caplog.at_level(logging.INFO, logger=kafka_checks.__name__):
        assert kafka_checks.check_cluster(target, kwargs, "orders") is False
        assert kafka_checks.check_cluster(target, kwargs, "orders") is False
    said = [r.getMessage() for r in caplog.records if "is off" in r.getMessage()]
    assert len(said) == 1 and "--operation TwoPhaseCommit" in said[0]
    assert cluster.probes == [False, True]
    required, kwargs = _target(tmp_path, **{"kafka.transaction.two.phase.commit.enable": "true"})
    with pytest.raises(KafkaAuthorizationError, match="= true, but the cluster at .* refused"):
        kafka_checks.check_cluster(required, kwargs, "orders")
