"""unaligned.testing.local_broker without a broker: the --topic values. The broker itself
(start, produce/consume, SIGINT, exit 0) is integration/test_local_broker.py."""

from __future__ import annotations

import pytest

from unaligned.testing.local_broker import TopicSpec, parse_topic


@pytest.mark.parametrize(
    ("raw", "spec"),
    [("events", TopicSpec("events", 1)), ("events:4", TopicSpec("events", 4))],
)
def test_a_topic_with_or_without_partitions(raw: str, spec: TopicSpec) -> None:
    assert parse_topic(raw) == spec


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (":3", "no topic name"),
        ("t:x", "not a number"),
        ("t:0", "at least 1"),
        ("t:-1", "at least 1"),
    ],
)
def test_a_bad_topic_says_what_is_wrong(raw: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_topic(raw)
