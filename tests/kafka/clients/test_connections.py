"""Connections from a KafkaClientConfig: bounded failures naming the bootstrap servers."""

from __future__ import annotations

import socket
import time

import pytest

from kafka import KafkaAdminClient
from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_options import client_config_from_options
from unaligned.kafka.clients.connections import OffsetLookup, open_consumer
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


class _FakeAdmin:
    """``describe_topics`` answers as kafka-python's admin client returns a MetadataResponse."""

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []
        self.closed = False

    def describe_topics(self, topics: list[str]) -> list[dict[str, object]]:
        self.asked.append(list(topics))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, list)
        return answer

    def close(self) -> None:
        self.closed = True


def _lookup_with(admin: _FakeAdmin, attempts: int = 2) -> OffsetLookup:
    config = client_config_from_options({"bootstrap.servers": "broker:9092"})
    lookup = OffsetLookup(config, attempts=attempts, retry_interval_ms=0)
    lookup._admin = admin
    return lookup


def test_confirm_topics_tells_deleted_from_existing_and_unclear() -> None:
    admin = _FakeAdmin(
        [
            [
                {
                    "name": "kept",
                    "error_code": 0,
                    "partitions": [{"partition_index": 1}, {"partition_index": 0}],
                },
                {
                    "name": "deleted",
                    "error_code": 3,
                    "partitions": [],
                },  # UNKNOWN_TOPIC_OR_PARTITION
                {"name": "electing", "error_code": 5, "partitions": []},  # LEADER_NOT_AVAILABLE
                {
                    "name": "secret",
                    "error_code": 29,
                    "partitions": [],
                },  # TOPIC_AUTHORIZATION_FAILED
            ]
        ]
    )
    lookup = _lookup_with(admin)
    found = lookup.confirm_topics(["secret", "kept", "deleted", "electing", "kept"])
    assert found == {"kept": (0, 1), "deleted": None}  # no clear answer: left out
    assert admin.asked == [["deleted", "electing", "kept", "secret"]]
    assert lookup.confirm_topics([]) == {}
    lookup.close()
    assert admin.closed


def test_confirm_topics_retries_a_failed_request_on_a_new_admin_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kafka import errors as kafka_errors

    first = _FakeAdmin([kafka_errors.NodeNotReadyError("not yet")])
    second = _FakeAdmin([[{"name": "t", "error_code": 3, "partitions": []}]])
    lookup = _lookup_with(first)
    built: list[dict[str, object]] = []

    class NewAdmin:
        DEFAULT_CONFIG = KafkaAdminClient.DEFAULT_CONFIG

        def __new__(cls, **kwargs: object) -> _FakeAdmin:  # type: ignore[misc]
            built.append(kwargs)
            return second

    monkeypatch.setattr("unaligned.kafka.clients.connections.KafkaAdminClient", NewAdmin)
    assert lookup.confirm_topics(["t"]) == {"t": None}
    assert first.closed and second.asked == [["t"]]
    # Built from the consumer's settings, only with the keys an admin client accepts.
    assert built and built[0]["bootstrap_servers"] == ["broker:9092"]
    assert "isolation_level" not in built[0] and "allow_auto_create_topics" not in built[0]


def test_a_pickled_lookup_carries_no_live_client() -> None:
    import pickle

    lookup = _lookup_with(_FakeAdmin([]))
    copy = pickle.loads(pickle.dumps(lookup))
    assert copy._admin is None and copy._consumer is None
