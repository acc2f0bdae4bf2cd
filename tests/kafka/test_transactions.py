"""Unit tests for unaligned.kafka.transactions (the executor's writer): no broker.

The first group pins the kafka-python internals the writer relies on; the coordinator's pins are
in tests/test_transaction_coordinator.py. The end-to-end proof against a real broker is
integration/test_kafka_transactions.py.
"""

from __future__ import annotations

import inspect

import pytest
from kafka.producer.transaction_manager import TransactionManager

import kafka
from kafka import KafkaProducer
from unaligned.errors import OptionError, TransactionWriteError
from unaligned.kafka import transactions as kt

# --- pinned kafka-python internals -------------------------------------------------------------


def test_kafka_python_is_the_pinned_version() -> None:
    assert kafka.__version__ == "3.0.12"


def test_producer_exposes_transaction_manager_producer_id_and_epoch() -> None:
    # TransactionalWriter reads producer._transaction_manager.producer_id_and_epoch.
    assert "self._transaction_manager = TransactionManager(" in inspect.getsource(
        KafkaProducer.__init__
    )
    manager = TransactionManager(transactional_id="t")
    assert manager.producer_id_and_epoch.producer_id == -1
    assert manager.producer_id_and_epoch.epoch == -1


# --- pure behaviour ----------------------------------------------------------------------------


def test_client_id_defaults_to_kafkas_producer_prefix_per_transactional_id() -> None:
    # Kafka's Java producer: client.id defaults to "producer-<transactional.id>", so each task
    # attempt is its own client for quotas and metrics.
    writers = [kt.TransactionalWriter({}, f"sink-7-{task}-0") for task in range(2)]
    assert [w.client_id for w in writers] == ["producer-sink-7-0-0", "producer-sink-7-1-0"]
    assert kt.TransactionalWriter({"client_id": "mine"}, "sink-7-0-0").client_id == "mine"


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


def test_payload_size_counts_key_value_and_headers() -> None:
    assert kt._payload_size(None, b"abc", None) == 3
    assert kt._payload_size(b"k", None, [("h", b"12"), ("hh", b"")]) == 1 + 1 + 2 + 2
