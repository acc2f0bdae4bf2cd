"""Unit tests for unaligned.kafka_transactions: no broker.

The first group pins the kafka-python internals the module relies on; if one of these fails after
a kafka-python upgrade, re-check the resume path (see the module docstring) before un-pinning.
The end-to-end proof against a real broker is integration/test_kafka_transactions.py.
"""

from __future__ import annotations

import inspect

import kafka
import kafka.errors as kafka_errors
import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, TransactionState
from kafka.cluster import ClusterMetadata
from kafka.net.manager import KafkaConnectionManager
from kafka.producer.transaction_manager import TransactionManager
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from unaligned import kafka_transactions as kt
from unaligned.errors import (
    KafkaUnavailableError,
    OptionError,
    TransactionAbortError,
    TransactionCommitError,
    TransactionWriteError,
)

PREPARED = kt.PreparedTransaction(
    transactional_id="q1-b7-p3", producer_id=4242, epoch=3, record_count=10
)


# --- pinned kafka-python internals -------------------------------------------------------------


def test_kafka_python_is_the_pinned_version() -> None:
    assert kafka.__version__ == "3.0.12"


def test_admin_client_exposes_connection_manager_with_run_and_send() -> None:
    # commit_prepared runs coroutines with admin._manager.run / call_soon and sends with
    # _manager.send; the live admin client's attributes are exercised by the integration tests.
    assert "self._manager = " in inspect.getsource(KafkaAdminClient.__init__)
    assert callable(KafkaConnectionManager.run)
    assert callable(KafkaConnectionManager.call_soon)
    assert list(inspect.signature(KafkaConnectionManager.send).parameters) == [
        "self",
        "request",
        "node_id",
        "request_timeout_ms",
    ]
    assert "synthesize_node_id" in inspect.signature(ClusterMetadata.add_coordinator).parameters


def test_end_txn_request_is_capped_at_transaction_protocol_v1() -> None:
    request = EndTxnRequest(
        transactional_id="t",
        producer_id=7,
        producer_epoch=2,
        committed=True,
        max_version=kt.END_TXN_MAX_VERSION,
    )
    assert (request.transactional_id, request.producer_id, request.producer_epoch) == ("t", 7, 2)
    assert request.committed is True
    # The negotiated version honours the per-request cap even against a 4.2 broker (EndTxn v5).
    assert BrokerVersionData((4, 2)).api_version(request) == 3
    assert BrokerVersionData((4, 2)).api_version(EndTxnRequest) > 3


def test_find_coordinator_request_for_a_transactional_id() -> None:
    assert CoordinatorType.TRANSACTION.value == 1
    request = FindCoordinatorRequest(
        key="t", key_type=CoordinatorType.TRANSACTION.value, coordinator_keys=["t"]
    )
    assert (request.key, request.key_type, request.coordinator_keys) == ("t", 1, ["t"])


def test_producer_exposes_transaction_manager_producer_id_and_epoch() -> None:
    # TransactionalWriter reads producer._transaction_manager.producer_id_and_epoch.
    assert "self._transaction_manager = TransactionManager(" in inspect.getsource(
        KafkaProducer.__init__
    )
    manager = TransactionManager(transactional_id="t")
    assert manager.producer_id_and_epoch.producer_id == -1
    assert manager.producer_id_and_epoch.epoch == -1


def test_broker_error_codes_the_commit_relies_on() -> None:
    assert kafka_errors.for_code(90) is kafka_errors.ProducerFencedError
    assert kafka_errors.for_code(48) is kafka_errors.InvalidTxnStateError
    assert kafka_errors.for_code(49) is kafka_errors.InvalidProducerIdMappingError
    assert kafka_errors.for_code(51) is kafka_errors.ConcurrentTransactionsError
    # Retried: CONCURRENT_TRANSACTIONS and coordinator moves. Refused: the rest.
    for retried in (
        kafka_errors.ConcurrentTransactionsError,
        kafka_errors.CoordinatorLoadInProgressError,
        kafka_errors.NotCoordinatorError,
        kafka_errors.CoordinatorNotAvailableError,
    ):
        assert issubclass(retried, kafka_errors.RetriableError), retried
    for refused in (
        kafka_errors.ProducerFencedError,
        kafka_errors.InvalidProducerEpochError,
        kafka_errors.InvalidTxnStateError,
        kafka_errors.InvalidProducerIdMappingError,
        kafka_errors.TransactionalIdAuthorizationFailedError,
    ):
        assert not issubclass(refused, kafka_errors.RetriableError), refused


def test_open_states_are_broker_state_names() -> None:
    assert {state.value for state in kt.OPEN_TRANSACTION_STATES} == {
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "PrepareEpochFence",
    }
    assert TransactionState("CompleteCommit") not in kt.OPEN_TRANSACTION_STATES


# --- pure behaviour ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error_type, words",
    [
        (kafka_errors.ProducerFencedError, "PRODUCER_FENCED"),
        (kafka_errors.InvalidTxnStateError, "INVALID_TXN_STATE"),
        (kafka_errors.InvalidProducerIdMappingError, "INVALID_PRODUCER_ID_MAPPING"),
    ],
)
def test_commit_refusal_names_id_producer_and_epoch(
    error_type: type[kafka_errors.KafkaError], words: str
) -> None:
    error = kt._refusal(PREPARED, kt._EndTxnOutcome.COMMIT, error_type)
    assert isinstance(error, TransactionCommitError)
    text = str(error)
    for part in ("'q1-b7-p3'", "producer id 4242", "epoch 3", words, "its 10 record(s) are lost"):
        assert part in text


def test_abort_refusal_is_an_abort_error() -> None:
    error = kt._refusal(PREPARED, kt._EndTxnOutcome.ABORT, kafka_errors.InvalidTxnStateError)
    assert isinstance(error, TransactionAbortError)
    assert "already committed" in str(error)
    assert "'q1-b7-p3'" in str(error)


def test_admin_kwargs_drop_producer_only_options() -> None:
    kwargs = {
        "bootstrap_servers": "127.0.0.1:1",
        "client_id": "c",
        "request_timeout_ms": 5000,
        "transaction_timeout_ms": 60000,
        "acks": "all",
        "linger_ms": 5,
        "security_protocol": "PLAINTEXT",
    }
    assert kt.admin_client_kwargs(kwargs) == {
        "bootstrap_servers": "127.0.0.1:1",
        "client_id": "c",
        "request_timeout_ms": 5000,
        "security_protocol": "PLAINTEXT",
    }


def test_writer_constructor_touches_no_network() -> None:
    # Port 1 on loopback has no broker: a connection attempt would fail or hang.
    writer = kt.TransactionalWriter({"bootstrap_servers": "127.0.0.1:1"}, "tx-1")
    assert writer.transactional_id == "tx-1"
    assert writer.unacknowledged_bytes() == 0
    with pytest.raises(TransactionWriteError, match="cannot send transaction 'tx-1'.*new"):
        writer.send("topic", b"v")
    with pytest.raises(TransactionWriteError, match="cannot flush"):
        writer.prepare()
    writer.abort()  # nothing begun: nothing to abort
    writer.close()
    with pytest.raises(TransactionWriteError, match="closed"):
        writer.begin()


def test_writer_rejects_contradicting_transactional_id() -> None:
    with pytest.raises(OptionError, match="contradicts"):
        kt.TransactionalWriter({"transactional_id": "other"}, "tx-1")
    with pytest.raises(OptionError, match="non-empty"):
        kt.TransactionalWriter({}, "")


def test_empty_prepared_transaction_needs_no_broker() -> None:
    empty = kt.PreparedTransaction("tx-empty", producer_id=1, epoch=0, record_count=0)
    unreachable = {"bootstrap_servers": "127.0.0.1:1", "bootstrap_timeout_ms": 100}
    kt.commit_prepared(unreachable, empty)
    kt.abort_prepared(unreachable, empty)


def test_payload_size_counts_key_value_and_headers() -> None:
    assert kt._payload_size(None, b"abc", None) == 3
    assert kt._payload_size(b"k", None, [("h", b"12"), ("hh", b"")]) == 1 + 1 + 2 + 2


def test_retriable_answers() -> None:
    assert kt._is_retriable(kafka_errors.ConcurrentTransactionsError)
    assert kt._is_retriable(kafka_errors.NotCoordinatorError)
    assert kt._is_retriable(kafka_errors.KafkaConnectionError("lost"))  # not answered at all
    assert not kt._is_retriable(kafka_errors.NoError)
    assert not kt._is_retriable(kafka_errors.ProducerFencedError)
    assert not kt._is_retriable(kafka_errors.InvalidTxnStateError)


def test_out_of_time_distinguishes_unreachable_from_busy() -> None:
    unreachable = kt._out_of_time(
        PREPARED, kafka_errors.KafkaConnectionError("lost"), kt._EndTxnOutcome.COMMIT, 9,
        {"bootstrap_servers": "10.0.0.1:9092"},
    )
    assert isinstance(unreachable, KafkaUnavailableError)
    assert "10.0.0.1:9092" in str(unreachable) and "'q1-b7-p3'" in str(unreachable)
    busy = kt._out_of_time(
        PREPARED, kafka_errors.ConcurrentTransactionsError, kt._EndTxnOutcome.COMMIT, 9, {}
    )
    assert isinstance(busy, TransactionCommitError)
    assert "CONCURRENT_TRANSACTIONS" in str(busy) and "9 attempts" in str(busy)
