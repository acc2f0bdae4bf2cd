"""The sink's own produce path (unaligned.kafka.produce.produce_session) on the real broker: batches
encoded from Arrow columns are written in a transaction over the process's kept connections,
exactly once and in order, also when there are more batches than requests in flight, when a
newer attempt fences the session, when the broker stops answering for a while, and when a batch
is refused."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from harness import wait_until
from unaligned.errors import TransactionWriteError
from unaligned.kafka.produce.produce_requests import MAX_IN_FLIGHT
from unaligned.kafka.produce.produce_session import ProduceSession
from unaligned.kafka.produce.producer_modes import InTransaction
from unaligned.kafka.records.record_encoder import encode_record_batches
from unaligned.kafka.transactions import transaction_coordinator as tc
from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]


def _tid(label: str) -> str:
    return f"ps-{label}-{uuid.uuid4().hex[:8]}"


def _values(first: int, count: int) -> pa.Array:
    return pa.array([f"value-{i:06d}-".encode() + b"x" * 40 for i in range(first, first + count)])


def _send_rows(
    session: ProduceSession, topic: str, partition: int, values: pa.Array, batch_size: int
) -> int:
    """Encode ``values`` into batches of about ``batch_size`` bytes and send them; returns how
    many batches."""
    batches = encode_record_batches(None, values, batch_size=batch_size)
    for batch in batches:
        rows = batch.stop - batch.start
        session.send_batch(topic, partition, batch.data, rows, rows * 50, wake_sender=False)
    session.wake_sender()
    return len(batches)


def _committed_values(kafka: EmbeddedKafka, topic: str) -> dict[int, list[bytes]]:
    wait_until(
        lambda: kafka.last_stable_offsets(topic) == kafka.end_offsets(topic), "markers written"
    )
    by_partition: dict[int, list[bytes]] = {}
    for record in kafka.consume_all(topic, read_committed=True):
        by_partition.setdefault(record.partition, []).append(record.value)
    return by_partition


def test_batches_are_committed_exactly_once_and_in_order(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """Three partitions, many more batches than requests in flight (small batches): each
    partition holds its rows once, in the order sent, once the driver's commit ran."""
    topic = new_topic(partitions=3)
    session = ProduceSession(client_kwargs, InTransaction(_tid("order")))
    sent: dict[int, list[bytes]] = {}
    try:
        session.begin()
        assert session.partition_count(topic) == 3
        batches = 0
        for chunk in range(4):
            for partition in range(3):
                values = _values(chunk * 1000 + partition * 100_000, 300)
                batches += _send_rows(session, topic, partition, values, batch_size=2048)
                sent.setdefault(partition, []).extend(values.to_pylist())
        assert batches > 3 * MAX_IN_FLIGHT
        prepared = session.prepare()
    finally:
        session.close()
    assert prepared.record_count == 3 * 4 * 300
    assert kafka.consume_all(topic, read_committed=True) == []  # open: nothing visible yet
    tc.commit_prepared(client_kwargs, prepared)
    assert _committed_values(kafka, topic) == sent


def test_a_newer_session_on_the_id_fences_the_older_one(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """InitProducerId of a second attempt aborts what the first wrote and fences it: the first
    can neither write nor prepare, the second commits alone."""
    topic = new_topic(partitions=1)
    tid = _tid("fence")
    older, newer = (
        ProduceSession(client_kwargs, InTransaction(tid)),
        ProduceSession(client_kwargs, InTransaction(tid)),
    )
    try:
        older.begin()
        _send_rows(older, topic, 0, _values(0, 100), batch_size=4096)
        older.flush()
        newer.begin()
        _send_rows(older, topic, 0, _values(100, 100), batch_size=4096)
        with pytest.raises(TransactionWriteError, match="not written"):
            older.prepare()
        _send_rows(newer, topic, 0, _values(500, 50), batch_size=4096)
        prepared = newer.prepare()
    finally:
        older.close()
        newer.close()
    tc.commit_prepared(client_kwargs, prepared)
    assert _committed_values(kafka, topic) == {0: _values(500, 50).to_pylist()}


def test_the_broker_stopped_mid_write_costs_no_record_and_no_duplicate(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """With the broker stopped (SIGSTOP) for 4 s while batches are in flight and a request
    timeout of 1.5 s, the session sends them again with the same sequences (the requests that
    timed out may still be written once the broker reads them); the broker keeps one copy of
    each."""
    topic = new_topic(partitions=2)
    kwargs = {**client_kwargs, "request_timeout_ms": 1500}
    session = ProduceSession(kwargs, InTransaction(_tid("stopped")))
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    resume = threading.Timer(4.0, os.kill, (kafka.broker_pid, signal.SIGCONT))
    try:
        session.begin()
        for partition in (0, 1):
            values = _values(partition * 10_000, 400)
            _send_rows(session, topic, partition, values, batch_size=4096)
            sent[partition] += values.to_pylist()
        session.flush()  # registered and written: what follows goes straight to Produce
        os.kill(kafka.broker_pid, signal.SIGSTOP)
        resume.start()
        for partition in (0, 1):
            values = _values(partition * 10_000 + 400, 400)
            _send_rows(session, topic, partition, values, batch_size=4096)
            sent[partition] += values.to_pylist()
        prepared = session.prepare()
    finally:
        resume.cancel()
        os.kill(kafka.broker_pid, signal.SIGCONT)
        session.close()
    assert prepared.record_count == 1600
    tc.commit_prepared(client_kwargs, prepared)
    assert _committed_values(kafka, topic) == sent


def test_waiting_for_acknowledgements_stops_at_the_bound_not_at_zero(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """wait_unacknowledged (between chunks) returns as soon as at most the bound is in flight:
    at once while the broker is stopped if the bytes in flight are within it, on timeout with
    the bytes outstanding named if not; once the broker answers again, everything commits."""
    topic = new_topic(partitions=1)
    session = ProduceSession(client_kwargs, InTransaction(_tid("bound")))
    try:
        session.begin()
        _send_rows(session, topic, 0, _values(0, 100), batch_size=4096)
        session.flush()  # registered: what follows goes straight to Produce
        os.kill(kafka.broker_pid, signal.SIGSTOP)
        try:
            _send_rows(session, topic, 0, _values(100, 400), batch_size=4096)
            in_flight = session.unacknowledged_bytes()
            assert in_flight == 400 * 50
            session.wait_unacknowledged(in_flight, timeout_s=0.5)  # within the bound: at once
            with pytest.raises(TransactionWriteError, match=f"{in_flight} bytes outstanding"):
                session.wait_unacknowledged(in_flight - 1, timeout_s=0.5)
        finally:
            os.kill(kafka.broker_pid, signal.SIGCONT)
        session.wait_unacknowledged(0)
        assert session.unacknowledged_bytes() == 0
        prepared = session.prepare()
    finally:
        session.close()
    tc.commit_prepared(client_kwargs, prepared)
    assert _committed_values(kafka, topic) == {0: _values(0, 500).to_pylist()}


def test_abort_leaves_nothing_visible(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    topic = new_topic(partitions=2)
    session = ProduceSession(client_kwargs, InTransaction(_tid("abort")))
    try:
        session.begin()
        _send_rows(session, topic, 0, _values(0, 200), batch_size=4096)
        _send_rows(session, topic, 1, _values(0, 200), batch_size=4096)
        session.flush()
        session.abort()
    finally:
        session.close()
    assert sum(kafka.end_offsets(topic).values()) > 400  # written, then the abort markers
    assert _committed_values(kafka, topic) == {}


def test_batches_refused_as_too_large_are_split_and_written_once_in_order(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """Batches over the topic's max.message.bytes, more of them in flight than one: each refused
    one is split and its halves sent from the same base sequence, those behind it sent again
    after them (OUT_OF_ORDER_SEQUENCE_NUMBER); every record once, in order."""
    topic = new_topic(partitions=1, config={"max.message.bytes": "2048"})
    session = ProduceSession(client_kwargs, InTransaction(_tid("split")))
    values = _values(0, 400)
    try:
        session.begin()
        assert _send_rows(session, topic, 0, values, 16 * 1024) > 1
        handle = session.prepare()
    finally:
        session.close()
    assert handle.record_count == 400
    tc.commit_prepared(client_kwargs, handle)
    assert _committed_values(kafka, topic) == {0: values.to_pylist()}


def test_a_refused_record_poisons_the_session_and_stops_its_partition(
    kafka: EmbeddedKafka, new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """A record over the topic's max.message.bytes even alone is refused (not retriable):
    prepare raises naming it, and the batches queued behind it on that partition are not
    written."""
    topic = new_topic(partitions=1, config={"max.message.bytes": "2048"})
    session = ProduceSession(client_kwargs, InTransaction(_tid("refused")))
    try:
        session.begin()
        big = encode_record_batches(None, pa.array([b"x" * 3000]), batch_size=64 * 1024)
        small = encode_record_batches(None, _values(200, 10), batch_size=1024)
        for batch in [*big, *small]:
            rows = batch.stop - batch.start
            session.send_batch(topic, 0, batch.data, rows, rows * 50)
        with pytest.raises(TransactionWriteError, match=f"too large for topic '{topic}'"):
            session.prepare()
        session.abort()
    finally:
        session.close()
    assert _committed_values(kafka, topic) == {}


def test_an_unknown_topic_is_refused_by_name(client_kwargs: dict[str, Any]) -> None:
    session = ProduceSession(client_kwargs, InTransaction(_tid("unknown")))
    try:
        session.begin()
        with pytest.raises(TransactionWriteError, match="no-such-topic-ps"):
            session.partition_count("no-such-topic-ps")
    finally:
        session.close()


def test_prepared_handle_names_the_epoch_the_coordinator_gave(
    new_topic: TopicFactory, client_kwargs: dict[str, Any]
) -> None:
    """Each begin on an id bumps its epoch; the handle carries the current one (what the
    driver's EndTxn must send)."""
    topic = new_topic(partitions=1)
    tid = _tid("epoch")
    handles: list[PreparedTransaction] = []
    for _ in range(2):
        session = ProduceSession(client_kwargs, InTransaction(tid))
        try:
            session.begin()
            _send_rows(session, topic, 0, _values(0, 5), batch_size=4096)
            handles.append(session.prepare())
        finally:
            session.close()
        tc.commit_prepared(client_kwargs, handles[-1])
    assert handles[0].producer_id == handles[1].producer_id
    assert handles[1].epoch == handles[0].epoch + 1
    assert np.all([h.record_count == 5 for h in handles])
