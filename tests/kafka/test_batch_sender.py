"""batch_sender: encoded batches queued in kafka-python's own record accumulator, no broker.

The first group pins the kafka-python internals the fast path relies on (the list is in
ARCHITECTURE.md, "Private APIs the project pins"); the rest drives a real ``RecordAccumulator``
and ``TransactionManager`` through drain, completion and the split of a too-large batch. The
broker end: integration/test_kafka_sink_fast_path.py.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from kafka.errors import IllegalStateError, KafkaError
from kafka.producer.producer_batch import ProducerBatch
from kafka.producer.record_accumulator import RecordAccumulator
from kafka.producer.sender import Sender
from kafka.producer.transaction_manager import ProducerIdAndEpoch, TransactionManager
from kafka.record.memory_records import MemoryRecords
from kafka.structs import TopicPartition

import kafka
from kafka import KafkaProducer
from unaligned.kafka import batch_sender
from unaligned.kafka.batch_sender import PrebuiltRecords, append_batch, fast_path_unavailable
from unaligned.kafka.record_encoder import encode_record_batches

TP = TopicPartition("t", 0)

# --- pinned kafka-python internals -------------------------------------------------------------


def test_kafka_python_internals_still_fit_the_batch_sender() -> None:
    assert kafka.__version__ == batch_sender.PINNED_KAFKA_PYTHON
    init = inspect.getsource(KafkaProducer.__init__)
    for wiring in ("self._accumulator = RecordAccumulator(", "self._sender = Sender("):
        assert wiring in init
    accumulator = RecordAccumulator()
    for name in ("_batches", "_tp_lock", "_incomplete", "_appends_in_progress", "_closed"):
        assert hasattr(accumulator, name), name
    assert accumulator.config["message_version"] == 2
    assert list(inspect.signature(ProducerBatch.__init__).parameters)[:3] == [
        "self",
        "tp",
        "records",
    ]
    drain = inspect.getsource(RecordAccumulator.drain_batches_for_one_node)
    assert "batch.records.set_producer_state(" in drain
    assert "batch.records.next_offset()" in drain
    split = inspect.getsource(RecordAccumulator.split_and_reenqueue)
    assert "batch._record_futures[future_index]" in split and ".rebind(" in split
    assert "records=batch.records.buffer()" in inspect.getsource(Sender._produce_request)
    assert hasattr(TransactionManager, "maybe_add_partition_to_transaction")


# --- a real accumulator, no network -------------------------------------------------------------


class _Cluster:
    def partitions_for_broker(self, node_id: int) -> set[TopicPartition]:
        return {TP}


def _producer() -> Any:
    manager = TransactionManager(transactional_id=None)
    manager.set_producer_id_and_epoch(ProducerIdAndEpoch(7, 3))
    accumulator = RecordAccumulator(transaction_manager=manager)
    wakeups: list[int] = []
    sender = SimpleNamespace(wakeup=lambda: wakeups.append(1))
    return SimpleNamespace(
        _accumulator=accumulator, _transaction_manager=manager, _sender=sender, wakeups=wakeups
    )


def _encoded(values: list[bytes]) -> bytes:
    (batch,) = encode_record_batches(None, pa.array(values, pa.binary()), now_ms=1)
    return batch.data


def _drain(producer: Any) -> list[ProducerBatch]:
    drained: list[ProducerBatch] = producer._accumulator.drain(_Cluster(), [0], 1 << 20)[0]
    return drained


def test_fast_path_fits_a_producer_of_the_pinned_version(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = _producer()
    assert fast_path_unavailable(producer) is None
    monkeypatch.setattr(batch_sender, "PINNED_KAFKA_PYTHON", "9.9.9")
    assert "9.9.9" in str(fast_path_unavailable(producer))
    monkeypatch.undo()
    producer._accumulator.config["message_version"] = 1
    assert "v2" in str(fast_path_unavailable(producer))
    assert fast_path_unavailable(SimpleNamespace()) is not None


def test_drained_batches_get_the_producer_state_and_consecutive_sequences() -> None:
    producer = _producer()
    done: list[tuple[int, BaseException | None]] = []
    append_batch(producer, TP, _encoded([b"a", b"b", b"c"]), 3, lambda n, e: done.append((n, e)))
    append_batch(producer, TP, _encoded([b"d", b"e"]), 2, lambda n, e: done.append((n, e)))
    assert producer.wakeups == [1, 1]
    first = _drain(producer)
    second = _drain(producer)  # one batch per partition and drain, as kafka-python does
    assert len(first) == len(second) == 1
    for batch, sequence, values in (
        (first[0], 0, [b"a", b"b", b"c"]),
        (second[0], 3, [b"d", b"e"]),
    ):
        (decoded,) = list(MemoryRecords(bytes(batch.records.buffer())))
        assert decoded.validate_crc()
        assert (decoded.producer_id, decoded.producer_epoch) == (7, 3)
        assert decoded.base_sequence == sequence
        assert [r.value for r in decoded] == values
        assert batch.producer_id == 7 and batch.base_sequence == sequence
    assert producer._transaction_manager.sequence_number(TP) == 5
    assert done == []
    first[0].complete(100, -1)
    second[0].complete_exceptionally(KafkaError("refused"), lambda index: KafkaError("refused"))
    assert done[0] == (3, None)
    assert done[1][0] == 0 and isinstance(done[1][1], KafkaError)
    assert not producer._accumulator.has_undrained()


def test_prebuilt_batches_keep_their_place_among_records_sent_one_by_one() -> None:
    producer = _producer()
    accumulator = producer._accumulator
    accumulator.append(TP, 1, None, b"first", [])
    append_batch(producer, TP, _encoded([b"second"]), 1, lambda n, e: None)
    accumulator.append(TP, 1, None, b"third", [])
    values = []
    for _ in range(3):
        (batch,) = _drain(producer)
        values += [r.value for b in MemoryRecords(bytes(batch.records.buffer())) for r in b]
    assert values == [b"first", b"second", b"third"]


def test_a_split_batch_reports_once_every_part_is_done() -> None:
    producer = _producer()
    done: list[tuple[int, BaseException | None]] = []
    append_batch(
        producer, TP, _encoded([b"%d" % i for i in range(5)]), 5, lambda n, e: done.append((n, e))
    )
    (batch,) = _drain(producer)
    assert producer._accumulator.split_and_reenqueue(batch) == 2  # MESSAGE_TOO_LARGE's handling
    parts = _drain(producer) + _drain(producer)
    assert [p.record_count for p in parts] == [3, 2]
    parts[0].complete(10, -1)
    assert done == []
    parts[1].complete(13, -1)
    assert done == [(5, None)]


def test_prebuilt_records_take_no_appends_and_no_state_after_sending() -> None:
    records = PrebuiltRecords(_encoded([b"x"]), 1)
    assert records.append(1, None, b"y") is None
    assert records.is_full() and records.next_offset() == 1
    records.set_producer_state(1, 0, 5, True)
    records.close()
    with pytest.raises(IllegalStateError):
        records.set_producer_state(1, 0, 6, True)
    (decoded,) = list(MemoryRecords(bytes(records.buffer())))
    assert decoded.is_transactional and decoded.base_sequence == 5 and decoded.validate_crc()


def test_a_closed_accumulator_refuses_batches() -> None:
    producer = _producer()
    producer._accumulator.close()
    with pytest.raises(IllegalStateError):
        append_batch(producer, TP, _encoded([b"x"]), 1, lambda n, e: None)
