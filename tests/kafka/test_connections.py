"""Connections from a KafkaClientConfig: bounded failures naming the bootstrap servers."""

from __future__ import annotations

import socket
import time

import pytest

from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.client_options import client_config_from_options
from unaligned.kafka.connections import OffsetLookup, open_consumer
from unaligned.kafka.partitions import TopicPartitionId


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_gives_kafka_unavailable_naming_the_servers_in_bounded_time() -> None:
    servers = f"127.0.0.1:{_closed_port()}"
    config = client_config_from_options(
        {"bootstrap.servers": servers, "request.timeout.ms": "1500"}
    )
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError, match=servers):
        open_consumer(config)
    assert time.monotonic() - started < 15

    lookup = OffsetLookup(config, attempts=2, retry_interval_ms=10)
    with pytest.raises(KafkaUnavailableError, match=servers):
        lookup.latest([TopicPartitionId("t", 0)])
    lookup.close()
