"""OffsetLookup without a broker: an unreachable cluster fails within the API timeout, naming
the servers and the option; what a Metadata answer confirms; pickling. Asking again through a
lost broker and a moved leader is proven on a real three-node cluster
(``integration/test_broker_failover.py``)."""

from __future__ import annotations

import pickle
import socket
import time

import kafka.errors as kafka_errors
import pytest

from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_options import client_config_from_options
from unaligned.kafka.clients.cluster_requests import TopicAnswer
from unaligned.kafka.clients.offset_lookup import OffsetLookup, confirmed
from unaligned.kafka.partitions import TopicPartitionId


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_cluster_fails_within_the_api_timeout_naming_servers_and_option() -> None:
    servers = f"127.0.0.1:{_closed_port()}"
    config = client_config_from_options(
        {
            "bootstrap.servers": servers,
            "request.timeout.ms": "500",
            "default.api.timeout.ms": "2000",
        }
    )
    lookup = OffsetLookup(config, attempts=3, retry_interval_ms=10)
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError, match="default.api.timeout.ms=2000") as raised:
        lookup.latest([TopicPartitionId("t", 0)])
    assert servers in str(raised.value)
    assert time.monotonic() - started < 15  # one bound, not one per attempt
    lookup.close()


def test_a_metadata_answer_confirms_existing_and_deleted_topics_only() -> None:
    answers = {
        "kept": TopicAnswer(kafka_errors.NoError, (0, 1), "id"),
        "deleted": TopicAnswer(kafka_errors.UnknownTopicOrPartitionError, (), None),
        "electing": TopicAnswer(kafka_errors.LeaderNotAvailableError, (), None),
        "secret": TopicAnswer(kafka_errors.TopicAuthorizationFailedError, (), None),
    }
    wanted = ["secret", "kept", "deleted", "electing", "kept", "unanswered"]
    assert confirmed(answers, wanted) == {"kept": (0, 1), "deleted": None}


def test_a_pickled_lookup_carries_no_live_client() -> None:
    config = client_config_from_options({"bootstrap.servers": "broker:9092"})
    lookup = OffsetLookup(config)
    lookup._ids["t"] = "some-id"
    copy = pickle.loads(pickle.dumps(lookup))
    assert copy._admin is None and copy._ids == {"t": "some-id"}
