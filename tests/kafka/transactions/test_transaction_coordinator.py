"""Unit tests for unaligned.kafka.transactions.transaction_coordinator: no broker.

The first group pins the kafka-python internals the module relies on; if one of these fails after
a kafka-python upgrade, re-check the resume path (see the module docstring) before un-pinning.
The end-to-end proof against a real broker is integration/test_kafka_transactions.py.
"""

from __future__ import annotations

import inspect
import threading

import kafka.errors as kafka_errors
import pytest
from kafka.admin import KafkaAdminClient, TransactionState
from kafka.cluster import ClusterMetadata
from kafka.net.manager import KafkaConnectionManager
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from unaligned.errors import KafkaUnavailableError, TransactionAbortError, TransactionCommitError
from unaligned.kafka.transactions import transaction_coordinator as tc
from unaligned.kafka.transactions import transaction_states
from unaligned.kafka.transactions.transactions import PreparedTransaction

PREPARED = PreparedTransaction(
    transactional_id="q1-b7-p3", producer_id=4242, epoch=3, record_count=10
)


# --- pinned kafka-python internals -------------------------------------------------------------


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
        max_version=tc.END_TXN_MAX_VERSION,
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
    assert {state.value for state in transaction_states.OPEN_TRANSACTION_STATES} == {
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "PrepareEpochFence",
    }
    assert TransactionState("CompleteCommit") not in transaction_states.OPEN_TRANSACTION_STATES


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
    error = tc._refusal(PREPARED, tc._EndTxnOutcome.COMMIT, error_type)
    assert isinstance(error, TransactionCommitError)
    text = str(error)
    for part in ("'q1-b7-p3'", "producer id 4242", "epoch 3", words, "its 10 record(s) are lost"):
        assert part in text


def test_abort_refusal_is_an_abort_error() -> None:
    error = tc._refusal(PREPARED, tc._EndTxnOutcome.ABORT, kafka_errors.InvalidTxnStateError)
    assert isinstance(error, TransactionAbortError)
    assert "already committed" in str(error)
    assert "'q1-b7-p3'" in str(error)


def test_empty_prepared_transaction_needs_no_broker() -> None:
    empty = PreparedTransaction("tx-empty", producer_id=1, epoch=0, record_count=0)
    unreachable = {"bootstrap_servers": "127.0.0.1:1", "bootstrap_timeout_ms": 100}
    # Nothing was sent in it, so nothing needs ending: no connection is attempted (the
    # unreachable servers would raise KafkaUnavailableError).
    assert tc.commit_prepared(unreachable, empty) is None
    assert tc.abort_prepared(unreachable, empty) is None


def test_retriable_answers() -> None:
    assert tc._is_retriable(kafka_errors.ConcurrentTransactionsError)
    assert tc._is_retriable(kafka_errors.NotCoordinatorError)
    assert tc._is_retriable(kafka_errors.KafkaConnectionError("lost"))  # not answered at all
    assert not tc._is_retriable(kafka_errors.NoError)
    assert not tc._is_retriable(kafka_errors.ProducerFencedError)
    assert not tc._is_retriable(kafka_errors.InvalidTxnStateError)


def test_out_of_time_distinguishes_unreachable_from_busy() -> None:
    unreachable = tc._out_of_time(
        PREPARED,
        kafka_errors.KafkaConnectionError("lost"),
        tc._EndTxnOutcome.COMMIT,
        9,
        {"bootstrap_servers": "10.0.0.1:9092"},
    )
    assert isinstance(unreachable, KafkaUnavailableError)
    assert "10.0.0.1:9092" in str(unreachable) and "'q1-b7-p3'" in str(unreachable)
    busy = tc._out_of_time(
        PREPARED, kafka_errors.ConcurrentTransactionsError, tc._EndTxnOutcome.COMMIT, 9, {}
    )
    assert isinstance(busy, TransactionCommitError)
    assert "CONCURRENT_TRANSACTIONS" in str(busy) and "9 attempts" in str(busy)


def test_fence_all_fences_every_id_at_once_and_raises_a_failure_after_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = ["q-0-0", "q-1-0", "q-2-0"]
    together = threading.Barrier(len(ids))  # broken (an error) if the fences ran one by one
    fenced: list[str] = []

    def fence(kwargs: object, tid: str) -> None:
        together.wait(timeout=30)
        fenced.append(tid)
        if tid == "q-1-0":
            raise TransactionAbortError(f"could not fence transactional id {tid!r}")

    monkeypatch.setattr(tc, "fence", fence)
    with pytest.raises(TransactionAbortError, match="q-1-0"):
        tc.fence_all({}, ids)
    assert sorted(fenced) == ids
    tc.fence_all({}, [])
