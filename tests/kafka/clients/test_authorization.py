"""A refused request in words: which request, resource and operation, and the kafka-acls command
that grants it; the request sites' refusals (FindCoordinator, InitProducerId with and without
enable2Pc, AddPartitionsToTxn, Metadata, Produce) name what Kafka 4.4's KafkaApis checks."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import kafka.errors as kafka_errors
import pytest

from unaligned.errors import KafkaAuthorizationError
from unaligned.kafka.clients import authorization
from unaligned.kafka.clients.authorization import (
    TOPIC,
    TRANSACTIONAL_ID,
    RequestRefused,
    Resource,
    explain,
    explained,
)
from unaligned.kafka.clients.retries import is_retriable
from unaligned.kafka.produce.produce_answers import produce_error
from unaligned.kafka.transactions.coordinator_requests import CoordinatorRequests

SCRAM = {
    "bootstrap_servers": "b1:9093,b2:9093",
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "app",
    "sasl_plain_password": "secret",
}


def test_the_principal_is_the_sasl_user_or_a_placeholder() -> None:
    assert authorization.principal(SCRAM) == "User:app"
    assert authorization.principal({"security_protocol": "PLAINTEXT"}) == "User:ANONYMOUS"
    assert authorization.principal({"security_protocol": "SSL"}) == "User:<principal>"


def test_the_grant_command_names_the_resource_its_pattern_and_each_operation() -> None:
    command = authorization.grant_command(
        SCRAM, Resource(TRANSACTIONAL_ID, "orders", prefixed=True), ["Write", "Describe"]
    )
    assert command == (
        "kafka-acls --bootstrap-server b1:9093,b2:9093 --command-config <admin.properties> "
        "--add --allow-principal User:app --operation Write --operation Describe "
        "--transactional-id orders --resource-pattern-type prefixed"
    )
    cluster = authorization.grant_command(SCRAM, Resource("Cluster"), ["DescribeConfigs"])
    assert cluster.endswith("--operation DescribeConfigs --cluster")


def test_a_refusal_is_worded_with_request_resource_operation_and_grant_never_a_secret() -> None:
    refusal = RequestRefused("InitProducerId", Resource(TRANSACTIONAL_ID, "orders-3-0"), ["Write"])
    assert not is_retriable(refusal) and authorization.is_refusal(refusal)
    assert isinstance(refusal, kafka_errors.KafkaError)  # handled like the broker's own error
    worded = explained(refusal, SCRAM, Resource(TRANSACTIONAL_ID, "orders", prefixed=True))
    assert isinstance(worded, KafkaAuthorizationError) and isinstance(worded, PermissionError)
    text = str(worded)
    assert text.startswith("the cluster at b1:9093,b2:9093 refused InitProducerId: principal ")
    assert "User:app lacks Write on TransactionalId 'orders-3-0'" in text
    assert "--operation Write --transactional-id orders --resource-pattern-type prefixed" in text
    assert "secret" not in text
    # without the sink's prefix: a placeholder for it, granted by prefix
    assert "--transactional-id <transactionalIdPrefix> --resource-pattern-type prefixed" in str(
        explain(refusal, SCRAM)
    )
    assert explain(kafka_errors.TopicAuthorizationFailedError(), SCRAM) is None


class _Manager:
    """Answers every request with ``answers[type(request).__name__]``."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.cluster = SimpleNamespace(
            get_coordinator=lambda *_: None, add_coordinator=lambda *_, **__: 1
        )

    async def send(self, request: Any, **_: Any) -> Any:
        return self.answers[type(request).__name__]


def _calls(manager: _Manager, two_phase_commit: bool = False) -> CoordinatorRequests:
    return CoordinatorRequests(manager, "orders-0-1", 1000, 60_000, two_phase_commit)


def _refusal(coroutine: Any) -> RequestRefused:
    with pytest.raises(RequestRefused) as refused:
        asyncio.run(coroutine)
    return refused.value


def _SOON() -> float:  # noqa: N802
    return time.monotonic() + 30


FOUND = SimpleNamespace(coordinators=[SimpleNamespace(error_code=0)])
DENIED = kafka_errors.TransactionalIdAuthorizationFailedError.errno


def test_find_coordinator_refused_is_transactional_id_describe() -> None:
    manager = _Manager(
        FindCoordinatorRequest=SimpleNamespace(coordinators=[SimpleNamespace(error_code=DENIED)])
    )
    refusal = _refusal(_calls(manager).init_producer_id(_SOON()))
    assert (refusal.request, refusal.operations) == ("FindCoordinator", ("Describe",))
    assert refusal.resource == Resource(TRANSACTIONAL_ID, "orders-0-1")


@pytest.mark.parametrize(
    "two_phase_commit, operation", [(False, "Write"), (True, "TwoPhaseCommit")]
)
def test_init_producer_id_refused_is_write_or_with_enable2pc_two_phase_commit(
    two_phase_commit: bool, operation: str
) -> None:
    manager = _Manager(
        FindCoordinatorRequest=FOUND, InitProducerIdRequest=SimpleNamespace(error_code=DENIED)
    )
    refusal = _refusal(_calls(manager, two_phase_commit).init_producer_id(_SOON()))
    assert refusal.operations == (operation,)
    if two_phase_commit:
        assert "enable2Pc" in refusal.request
        assert "transaction.two.phase.commit.enable=false" in refusal.note


def test_add_partitions_refused_names_the_topic_or_the_id() -> None:
    def answer(codes: dict[str, int]) -> Any:
        return SimpleNamespace(
            results_by_topic_v3_and_below=[
                SimpleNamespace(
                    name=t, results_by_partition=[SimpleNamespace(partition_error_code=c)]
                )
                for t, c in codes.items()
            ]
        )

    not_attempted = kafka_errors.OperationNotAttemptedError.errno
    topic_denied = kafka_errors.TopicAuthorizationFailedError.errno
    manager = _Manager(
        FindCoordinatorRequest=FOUND,
        AddPartitionsToTxnRequest=answer({"ok": not_attempted, "out": topic_denied}),
    )
    add = _calls(manager).add_partitions((7, 0), {"ok": [0], "out": [0]}, _SOON())
    refusal = _refusal(add)
    assert (refusal.resource, refusal.operations) == (Resource(TOPIC, "out"), ("Write",))
    manager.answers["AddPartitionsToTxnRequest"] = answer({"out": DENIED})
    refusal = _refusal(_calls(manager).add_partitions((7, 0), {"out": [0]}, _SOON()))
    assert refusal.resource == Resource(TRANSACTIONAL_ID, "orders-0-1")


def test_metadata_of_a_topic_the_principal_may_not_describe_is_not_called_missing() -> None:
    topic = SimpleNamespace(
        name="out", error_code=kafka_errors.TopicAuthorizationFailedError.errno, partitions=[]
    )
    manager = _Manager(MetadataRequest=SimpleNamespace(topics=[topic]))
    manager.cluster.update_metadata = lambda _: None  # type: ignore[attr-defined]
    refusal = _refusal(_calls(manager).leaders("out", _SOON()))
    assert (refusal.request, refusal.operations) == ("Metadata", ("Describe",))
    assert "or it does not exist" in str(refusal)


def test_a_produce_answer_refusing_the_topic_is_topic_write() -> None:
    answer = SimpleNamespace(
        responses=[
            SimpleNamespace(
                partition_responses=[
                    SimpleNamespace(
                        index=2, error_code=kafka_errors.TopicAuthorizationFailedError.errno
                    )
                ]
            )
        ]
    )
    error = produce_error(answer, SimpleNamespace(topic="out", partition=2))  # type: ignore[arg-type]
    assert isinstance(error, RequestRefused)
    assert (error.request, error.resource, error.operations) == (
        "Produce",
        Resource(TOPIC, "out"),
        ("Write",),
    )
