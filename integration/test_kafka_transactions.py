"""Kafka transaction operations against the real embedded broker.

The central claim: a transaction prepared by one OS process, which then dies without committing,
is committed by another process from its (transactional id, producer id, epoch) alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from harness import wait_until
from unaligned.errors import TransactionAbortError, TransactionCommitError, TransactionWriteError
from unaligned.kafka.produce.produce_session import ProduceSession
from unaligned.kafka.produce.producer_modes import InTransaction
from unaligned.kafka.records.record_encoder import encode_record_batches
from unaligned.kafka.transactions import transaction_coordinator as tc
from unaligned.kafka.transactions import transaction_states
from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]


def _txn_id(label: str) -> str:
    return f"it-{label}-{uuid.uuid4().hex[:8]}"


def _lso_reached_end(kafka: EmbeddedKafka, topic: str) -> bool:
    return kafka.last_stable_offsets(topic) == kafka.end_offsets(topic)


def _values(kafka: EmbeddedKafka, topic: str) -> list[bytes]:
    return sorted(record.value for record in kafka.consume_all(topic, read_committed=True))


def _prepare_here(
    client_kwargs: dict[str, Any], topic: str, transactional_id: str, count: int, partitions: int
) -> PreparedTransaction:
    session = ProduceSession(client_kwargs, InTransaction(transactional_id))
    try:
        session.begin()
        for partition in range(partitions):
            values = [b"v%04d" % i for i in range(count) if i % partitions == partition]
            for batch in encode_record_batches(None, pa.array(values, pa.binary())):
                rows = batch.record_count
                session.send_batch(topic, partition, batch.data, rows, batch.payload_bytes)
        return session.prepare()
    finally:
        session.close()


_PREPARE_AND_DIE = textwrap.dedent(
    """
    import dataclasses, json, os, sys
    import pyarrow as pa
    from unaligned.kafka.produce.produce_session import ProduceSession
    from unaligned.kafka.produce.producer_modes import InTransaction
    from unaligned.kafka.records.record_encoder import encode_record_batches

    servers, topic, transactional_id, count, partitions = sys.argv[1:]
    session = ProduceSession(
        {"bootstrap_servers": servers, "transaction_timeout_ms": 60000},
        InTransaction(transactional_id),
    )
    session.begin()
    for p in range(int(partitions)):
        values = [b"v%04d" % i for i in range(int(count)) if i % int(partitions) == p]
        for b in encode_record_batches(None, pa.array(values, pa.binary())):
            session.send_batch(topic, p, b.data, b.record_count, b.payload_bytes)
    prepared = session.prepare()
    print(json.dumps(dataclasses.asdict(prepared)), flush=True)
    os._exit(0)  # hard exit: no close, no atexit, no EndTxn
    """
)


def test_prepared_in_a_dead_process_is_committed_by_another(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    topic = new_topic(partitions=3)
    transactional_id = _txn_id("dead")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _PREPARE_AND_DIE,
            kafka.bootstrap_servers,
            topic,
            transactional_id,
            "50",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    prepared = PreparedTransaction(**json.loads(done.stdout.strip().splitlines()[-1]))
    assert prepared.transactional_id == transactional_id
    assert prepared.record_count == 50

    # The writer is gone; its transaction is still open and holds back read_committed readers.
    assert sum(kafka.end_offsets(topic).values()) == 50
    assert kafka.last_stable_offsets(topic) != kafka.end_offsets(topic)
    assert _values(kafka, topic) == []
    assert transaction_states.list_transactional_ids(client_kwargs, transactional_id) == [
        transactional_id
    ]

    tc.commit_prepared(client_kwargs, prepared)

    wait_until(lambda: _lso_reached_end(kafka, topic), "last stable offset == end offset")
    assert _values(kafka, topic) == [b"v%04d" % i for i in range(50)]
    # 50 records + one commit marker per partition.
    assert sum(kafka.end_offsets(topic).values()) == 53


def test_commit_is_idempotent_and_refusals_are_errors(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    topic = new_topic(partitions=1)
    committed = _prepare_here(client_kwargs, topic, _txn_id("twice"), 5, 1)
    tc.commit_prepared(client_kwargs, committed)
    tc.commit_prepared(client_kwargs, committed)  # a repeated commit is success
    wait_until(lambda: _lso_reached_end(kafka, topic), "commit markers")
    assert len(_values(kafka, topic)) == 5
    with pytest.raises(TransactionAbortError, match="INVALID_TXN_STATE.*already committed"):
        tc.abort_prepared(client_kwargs, committed)
    # A fence bumps the epoch even after the commit: a later commit is refused as fenced,
    # while the records stay committed. (Recovery re-commits before it fences.)
    tc.fence(client_kwargs, committed.transactional_id)
    with pytest.raises(TransactionCommitError, match="PRODUCER_FENCED"):
        tc.commit_prepared(client_kwargs, committed)

    aborted = _prepare_here(client_kwargs, topic, _txn_id("aborted"), 3, 1)
    tc.abort_prepared(client_kwargs, aborted)
    tc.abort_prepared(client_kwargs, aborted)  # a repeated abort is success
    with pytest.raises(TransactionCommitError) as refused:
        tc.commit_prepared(client_kwargs, aborted)
    message = str(refused.value)
    assert "INVALID_TXN_STATE" in message
    assert repr(aborted.transactional_id) in message
    assert f"producer id {aborted.producer_id}" in message and f"epoch {aborted.epoch}" in message
    wait_until(lambda: _lso_reached_end(kafka, topic), "abort markers")
    assert len(_values(kafka, topic)) == 5

    unknown = PreparedTransaction(
        _txn_id("unknown"), producer_id=aborted.producer_id, epoch=aborted.epoch, record_count=1
    )
    with pytest.raises(TransactionCommitError, match="INVALID_PRODUCER_ID_MAPPING"):
        tc.commit_prepared(client_kwargs, unknown)


def test_fence_aborts_the_open_transaction_and_rejects_its_commit(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    topic = new_topic(partitions=2)
    prepared = _prepare_here(client_kwargs, topic, _txn_id("fence"), 20, 2)
    assert kafka.last_stable_offsets(topic) != kafka.end_offsets(topic)

    tc.fence(client_kwargs, prepared.transactional_id)

    # fence() returns once the coordinator completed the abort.
    assert _lso_reached_end(kafka, topic)
    assert _values(kafka, topic) == []
    with pytest.raises(TransactionCommitError) as refused:
        tc.commit_prepared(client_kwargs, prepared)
    assert "PRODUCER_FENCED" in str(refused.value)
    assert f"epoch {prepared.epoch}" in str(refused.value)
    tc.fence(client_kwargs, _txn_id("never-used"))  # an unknown id is fine


def test_list_transactional_ids_finds_open_ones_by_prefix(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    topic = new_topic(partitions=1)
    prefix = _txn_id("list")
    open_one = _prepare_here(client_kwargs, topic, f"{prefix}-open", 2, 1)
    committed = _prepare_here(client_kwargs, topic, f"{prefix}-committed", 2, 1)
    aborted = _prepare_here(client_kwargs, topic, f"{prefix}-aborted", 2, 1)
    other = _prepare_here(client_kwargs, topic, _txn_id("other"), 2, 1)
    tc.commit_prepared(client_kwargs, committed)
    tc.abort_prepared(client_kwargs, aborted)
    try:
        wait_until(
            lambda: (
                transaction_states.list_transactional_ids(client_kwargs, prefix)
                == [open_one.transactional_id]
            ),
            "only the open transaction listed",
        )
        assert transaction_states.list_transactional_ids(
            client_kwargs, prefix, open_only=False
        ) == sorted(
            [open_one.transactional_id, committed.transactional_id, aborted.transactional_id]
        )
    finally:
        tc.abort_prepared(client_kwargs, open_one)
        tc.abort_prepared(client_kwargs, other)
    wait_until(
        lambda: transaction_states.list_transactional_ids(client_kwargs, prefix) == [],
        "nothing open",
    )


def test_broker_max_transaction_timeout_is_what_the_broker_enforces(
    new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    maximum = tc.broker_max_transaction_timeout_ms(client_kwargs)
    assert maximum > 0
    at_max = ProduceSession(
        {**client_kwargs, "transaction_timeout_ms": maximum}, InTransaction(_txn_id("max"))
    )
    with at_max:
        at_max.begin()
        at_max.abort()
    above = ProduceSession(
        {**client_kwargs, "transaction_timeout_ms": maximum + 1}, InTransaction(_txn_id("above"))
    )
    with above, pytest.raises(TransactionWriteError, match="InvalidTransactionTimeout"):
        above.begin()


def test_commit_all_prepared_commits_every_committable_one_then_raises(
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    client_kwargs: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tc, "_END_TXN_WINDOW", 3)  # 7 transactions: three pipelined windows
    topic = new_topic(partitions=2)
    prepared = [_prepare_here(client_kwargs, topic, _txn_id(f"all{i}"), 3, 2) for i in range(7)]
    tc.abort_prepared(client_kwargs, prepared[4])
    with pytest.raises(TransactionCommitError, match=repr(prepared[4].transactional_id)):
        tc.commit_all_prepared(client_kwargs, prepared)
    wait_until(lambda: _lso_reached_end(kafka, topic), "commit markers")
    assert len(_values(kafka, topic)) == 6 * 3
    tc.commit_all_prepared(client_kwargs, prepared[:4] + prepared[5:])  # again: success


def test_the_kept_admin_client_answers_afresh_after_the_broker_was_briefly_away(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """The id pool asks DescribeTransactions through one admin client kept per process: with the
    broker stopped (SIGSTOP) for 3 s the question waits and then gets the coordinator's answer,
    and an answer is never kept (the transaction aborted in between is seen as ended)."""
    topic = new_topic(partitions=1)
    prepared = _prepare_here(client_kwargs, topic, _txn_id("kept-client"), 3, 1)
    unknown = _txn_id("never-used")
    tid = prepared.transactional_id
    assert transaction_states.is_open(
        transaction_states.describe_transactions(client_kwargs, [tid])[tid]
    )
    os.kill(kafka.broker_pid, signal.SIGSTOP)
    resume = threading.Timer(3.0, os.kill, (kafka.broker_pid, signal.SIGCONT))
    resume.start()
    try:
        while_away = transaction_states.describe_transactions(client_kwargs, [tid, unknown])
    finally:
        resume.cancel()
        os.kill(kafka.broker_pid, signal.SIGCONT)
    assert transaction_states.is_open(while_away[tid]) and while_away[unknown] is None
    tc.abort_prepared(client_kwargs, prepared)
    wait_until(  # PrepareAbort until the markers are written, then CompleteAbort
        lambda: (
            not transaction_states.is_open(
                transaction_states.describe_transactions(client_kwargs, [tid])[tid]
            )
        ),
        f"{tid} seen as ended after its abort",
    )
