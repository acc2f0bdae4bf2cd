"""Which consumer group the source commits to, and that a failing commit never fails the query."""

from __future__ import annotations

import logging

import pytest

from unaligned.kafka.clients.client_options import client_config_from_options
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.group_offsets import GroupOffsets, group_id
from unaligned.source.offsets import KafkaSourceOffset


def test_the_group_is_kafka_group_id_else_the_prefix_and_the_query_token() -> None:
    assert group_id("G", "P", "tok") == "G"
    assert group_id(None, "P", "tok") == "P-tok"
    assert group_id(None, "P", None) is None  # an offset without a token: no stable group
    assert group_id(None, None, "tok") is None


def test_a_commit_that_fails_is_logged_once_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    config = client_config_from_options(
        {
            "bootstrap.servers": "127.0.0.1:1",  # nothing listens there
            "group.id": "G",
            "request.timeout.ms": "300",
            "reconnect.backoff.max.ms": "50",
        }
    )
    offsets = GroupOffsets(config, None)
    end = KafkaSourceOffset({TopicPartitionId("t", 0): 5}, 0, "tok")
    with caplog.at_level(logging.WARNING):
        offsets.commit(end)
        offsets.commit(end)
    warnings = [r for r in caplog.records if "could not commit offsets" in r.getMessage()]
    assert len(warnings) == 1 and "'G'" in warnings[0].getMessage()


def test_no_group_means_no_client_at_all() -> None:
    config = client_config_from_options({"bootstrap.servers": "127.0.0.1:1"})
    offsets = GroupOffsets(config, None)
    offsets.commit(KafkaSourceOffset({TopicPartitionId("t", 0): 5}, 0, "tok"))
    assert offsets._consumer is None
