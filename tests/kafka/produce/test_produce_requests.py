"""Unit tests for unaligned.kafka.produce.produce_requests and coordinator_requests: no broker.

The first group pins the protocol shapes the sink's produce path relies on (its private
kafka-python names are pinned by tests/kafka/clients/test_client_internals.py); if one fails after a
kafka-python upgrade, re-check the module's sending rules before un-pinning. The behaviour
against a real broker (order, fencing, a broker stopped mid-write, refusals, splits) is
integration/test_produce_session.py."""

from __future__ import annotations

import kafka.errors as kafka_errors
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    ProduceRequest,
)

from unaligned.kafka.transactions import coordinator_requests

# --- protocol shapes the session speaks ---------------------------------------------------------


def test_requests_are_capped_at_the_versions_the_session_speaks() -> None:
    broker = BrokerVersionData((4, 2))
    produce = ProduceRequest(
        transactional_id="t",
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="x",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"")
                ],
            )
        ],
        min_version=3,
        max_version=9,
    )
    assert broker.api_version(produce) == 9  # v12+ would be transaction protocol v2
    init = InitProducerIdRequest(
        transactional_id="t",
        transaction_timeout_ms=60_000,
        producer_id=-1,
        producer_epoch=-1,
        max_version=4,
    )
    assert broker.api_version(init) == 4
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    add = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="t",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[topic(name="x", partitions=[0, 1])],
        max_version=3,
    )
    assert broker.api_version(add) == 3


def test_add_partitions_reports_the_real_error_before_operation_not_attempted() -> None:
    result = AddPartitionsToTxnResponse.AddPartitionsToTxnResult
    topic = result.AddPartitionsToTxnTopicResult
    partition = topic.AddPartitionsToTxnPartitionResult
    not_attempted = kafka_errors.OperationNotAttemptedError.errno
    concurrent = kafka_errors.ConcurrentTransactionsError.errno

    def answer(*codes: int) -> AddPartitionsToTxnResponse:
        return AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                topic(
                    name="x",
                    results_by_partition=[
                        partition(partition_index=i, partition_error_code=c)
                        for i, c in enumerate(codes)
                    ],
                )
            ]
        )

    first_error = coordinator_requests.add_partitions_error_code
    assert first_error(answer(0, 0)) == 0
    assert first_error(answer(not_attempted, concurrent)) == concurrent
    assert first_error(answer(not_attempted)) == not_attempted
