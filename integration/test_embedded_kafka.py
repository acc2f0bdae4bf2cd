"""EmbeddedKafka against the real broker it starts (the session ``kafka`` fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kafka import KafkaProducer
from unaligned.errors import EmbeddedKafkaError
from unaligned.testing import EmbeddedKafka
from unaligned.testing.topic_records import ProduceRecord

TopicFactory = Callable[..., str]


def test_bootstrap_servers_is_a_loopback_address(kafka: EmbeddedKafka) -> None:
    host, _, port = kafka.bootstrap_servers.rpartition(":")
    assert host == "127.0.0.1"
    assert int(port) > 0


def test_round_trip_keeps_keys_values_headers_and_timestamps(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=3)
    stamped = int(time.time() * 1000) - 3_600_000  # within retention: never deleted mid-test
    sent: list[ProduceRecord] = [
        (
            i % 3,
            f"k{i}".encode(),
            f"v{i}".encode(),
            [("h", f"{i}".encode()), ("empty", b"")],
            stamped + i,
        )
        for i in range(30)
    ]
    sent.append((1, b"gone", None, None, None))  # a tombstone without headers or timestamp
    before = int(time.time() * 1000)
    kafka.produce(topic, sent)

    records = kafka.consume_all(topic)

    assert len(records) == 31
    assert [r.partition for r in records] == sorted(r.partition for r in records)
    got = {
        (r.partition, r.key, r.value, tuple(r.headers), r.timestamp)
        for r in records
        if r.value is not None
    }
    assert got == {(p, k, v, tuple(h or ()), ts) for p, k, v, h, ts in sent if v is not None}
    tombstone = [r for r in records if r.value is None]
    assert len(tombstone) == 1
    assert (tombstone[0].key, tombstone[0].partition, tombstone[0].headers) == (b"gone", 1, [])
    assert tombstone[0].timestamp >= before  # the producer stamped it
    for partition in range(3):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(len(offsets)))
    assert kafka.end_offsets(topic) == {0: 10, 1: 11, 2: 10}


def test_create_topic_applies_config_and_rejects_duplicates(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=2, config={"cleanup.policy": "compact"})
    assert kafka.partitions(topic) == [0, 1]
    with pytest.raises(EmbeddedKafkaError, match=topic):
        kafka.create_topic(topic, partitions=2)


def test_add_partitions_grows_the_topic(kafka: EmbeddedKafka, new_topic: TopicFactory) -> None:
    topic = new_topic(partitions=2)
    kafka.add_partitions(topic, 5)
    assert kafka.partitions(topic) == [0, 1, 2, 3, 4]
    kafka.produce(topic, [(4, b"k", b"in the new partition", None, None)])
    records = kafka.consume_all(topic)
    assert [(r.partition, r.value) for r in records] == [(4, b"in the new partition")]


def test_delete_records_moves_the_first_readable_offset(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=2)
    kafka.produce(
        topic, [(p, None, f"{p}-{i}".encode(), None, None) for p in (0, 1) for i in range(10)]
    )

    kafka.delete_records(topic, 0, 7)

    records = kafka.consume_all(topic)
    assert [r.offset for r in records if r.partition == 0] == [7, 8, 9]
    assert [r.offset for r in records if r.partition == 1] == list(range(10))
    assert kafka.end_offsets(topic) == {0: 10, 1: 10}


def test_delete_topic_removes_it(kafka: EmbeddedKafka, new_topic: TopicFactory) -> None:
    topic = new_topic(partitions=1)
    kafka.delete_topic(topic)
    with pytest.raises(EmbeddedKafkaError, match="does not exist"):
        kafka.partitions(topic)


def test_read_committed_sees_committed_transactions_only(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers,
        transactional_id=f"embedded-kafka-test-{uuid.uuid4().hex}",
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, value=f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction()

        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, value=f"aborted-{i}".encode(), partition=i % 2)
        producer.flush()  # records still unsent at abort time would never reach the log
        producer.abort_transaction()

        producer.begin_transaction()
        producer.send(topic, value=b"open", partition=0)
        producer.flush()
        # An open transaction holds the last stable offset of partition 0 at its first record.
        open_lso = kafka.last_stable_offsets(topic)
        open_end = kafka.end_offsets(topic)
        assert open_lso[0] == open_end[0] - 1
        assert open_lso[1] == open_end[1]
        visible_while_open = [r.value for r in kafka.consume_all(topic)]
        producer.commit_transaction()
    finally:
        producer.close()

    committed = sorted(r.value for r in kafka.consume_all(topic))
    everything = sorted(r.value for r in kafka.consume_all(topic, read_committed=False))

    assert sorted(visible_while_open) == sorted(f"committed-{i}".encode() for i in range(5))
    assert committed == sorted([f"committed-{i}".encode() for i in range(5)] + [b"open"])
    assert everything == sorted(committed + [f"aborted-{i}".encode() for i in range(4)])
    assert kafka.last_stable_offsets(topic) == kafka.end_offsets(topic)


def _produce_seconds(kafka: EmbeddedKafka, topic: str, total_bytes: int) -> float:
    producer = KafkaProducer(
        bootstrap_servers=kafka.bootstrap_servers,
        client_id=f"throttle-test-{uuid.uuid4().hex[:6]}",
        acks="all",
        linger_ms=5,
    )
    try:
        producer.send(topic, value=b"warm-up").get(timeout=30)  # connect before the clock starts
        value = b"x" * 10_000
        started = time.monotonic()
        futures = [producer.send(topic, value=value) for _ in range(total_bytes // len(value))]
        producer.flush(timeout=120)
        for future in futures:
            future.get(timeout=1)
        return time.monotonic() - started
    finally:
        producer.close()


def test_throttle_producers_slows_every_producer_down(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    topic = new_topic(partitions=1)
    total = 1_000_000
    rate = 150_000
    unthrottled = _produce_seconds(kafka, topic, total)
    kafka.throttle_producers(rate)
    try:
        throttled = _produce_seconds(kafka, topic, total)
    finally:
        kafka.throttle_producers(None)
    after_removal = _produce_seconds(kafka, topic, total)

    # Kafka lets about one quota window of bytes through (the embedded broker measures over
    # 2 x 1 s), then delays responses until the windowed rate is at the quota: 1 MB at 150 KB/s
    # takes about 6 s. Generous bounds: a behaviour check, no benchmark.
    assert total / throttled < 2 * rate, (throttled, unthrottled)
    assert throttled > 2 * unthrottled, (throttled, unthrottled)
    assert after_removal < throttled / 2, (after_removal, throttled)


def test_throttle_producers_together_shares_one_rate_among_client_ids(
    kafka: EmbeddedKafka, new_topic: TopicFactory
) -> None:
    # Four producers with four client ids at once: under a per-client quota each would get the
    # whole rate; under the user quota they share it (and get one burst window together).
    topic = new_topic(partitions=1)
    each, rate = 400_000, 200_000
    kafka.throttle_producers_together(rate)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            started = time.monotonic()
            list(pool.map(lambda _: _produce_seconds(kafka, topic, each), range(4)))
            elapsed = time.monotonic() - started
    finally:
        kafka.throttle_producers_together(None)
    assert 4 * each / elapsed < 2 * rate, elapsed  # per client it would be about 4 x rate
    assert _produce_seconds(kafka, topic, each) < elapsed / 2  # and the quota is gone


def test_throttle_producers_rejects_a_non_positive_rate(kafka: EmbeddedKafka) -> None:
    with pytest.raises(ValueError, match="bytes_per_second"):
        kafka.throttle_producers(0)


def _listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(hex address, port) of every TCP socket in LISTEN state owned by process ``pid``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A = LISTEN
                address, port = local.split(":")
                found.append((address, int(port, 16)))
    return found


def test_broker_listens_on_loopback_only(kafka: EmbeddedKafka) -> None:
    loopback = {
        "0100007F",  # 127.0.0.1 in /proc/net/tcp (little-endian)
        "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1 in /proc/net/tcp6
        "00000000000000000000000001000000",  # ::1
    }
    listening = _listening_sockets(kafka.broker_pid)
    broker_port = int(kafka.bootstrap_servers.rpartition(":")[2])
    assert broker_port in {port for _, port in listening}
    assert len(listening) >= 2  # the broker and the controller listener
    assert {address for address, _ in listening} <= loopback, listening


def test_broker_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from unaligned.testing import EmbeddedKafka
        kafka = EmbeddedKafka(data_dir=Path(sys.argv[1])).__enter__()
        print(kafka.broker_pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "kafka")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"parent printed {line!r}"
        broker_pid = int(line)
        os.kill(broker_pid, 0)  # the broker runs
    finally:
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait()

    deadline = time.monotonic() + 60
    while _running(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _running(broker_pid)
    if alive:
        os.kill(broker_pid, signal.SIGKILL)
    assert not alive, "the broker kept running after its parent was killed"


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "State:\tZ" not in status
