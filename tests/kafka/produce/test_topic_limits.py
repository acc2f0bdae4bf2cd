"""topic_limits' pure part: the room it keeps for a codec. Asking the brokers for a topic's
max.message.bytes, and the fast path keeping within it: integration/test_kafka_sink_fast_path.py."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from unaligned._util.process_memo import ProcessMemo
from unaligned.kafka.produce import topic_limits
from unaligned.kafka.produce.topic_limits import batch_limit
from unaligned.kafka.records.record_encoder import encode_record_batches

LIMITS = [1_024, 20_000, 1_048_588]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("limit", LIMITS)
def test_incompressible_batches_bounded_by_batch_limit_stay_within_the_topic_limit(
    compression: str, limit: int
) -> None:
    """The encoder bounds the uncompressed size; random bytes come out of every codec a little
    larger, and still within the limit."""
    values = pa.array([os.urandom(size) for size in [100] * 3000 + [700, 5, 800]], pa.binary())
    bound = batch_limit(limit, compression)
    batches = encode_record_batches(
        None,
        values,
        compression=compression,
        batch_size=bound,
        max_request_size=bound,
        now_ms=0,
    )
    assert sum(b.record_count for b in batches) == len(values)
    assert max(len(b.data) for b in batches) <= limit
    if limit > 100_000:  # the records fill most of each batch's room (no needless cut)
        assert len(batches) == 1


def test_no_room_is_taken_without_a_codec() -> None:
    assert batch_limit(20_000, "none") == 20_000
    assert 19_000 < batch_limit(20_000, "lz4") < 20_000


def test_known_limits_are_kept_per_process_and_a_failed_lookup_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[list[str]] = []
    answers = iter([{"a": None, "b": 30_000}, {"a": 20_000}, {"b": 40_000}])

    def describe(client_kwargs: object, topics: list[str]) -> dict[str, int | None]:
        asked.append(topics)
        return next(answers)

    monkeypatch.setattr(topic_limits, "_describe", describe)
    monkeypatch.setattr(topic_limits, "_LIMITS", ProcessMemo())
    kwargs = {"bootstrap_servers": ["nowhere:9092"]}
    assert topic_limits.max_message_bytes(kwargs, ["b", "a", "a"]) == {"a": None, "b": 30_000}
    assert topic_limits.max_message_bytes(kwargs, ["a", "b"]) == {"a": 20_000, "b": 30_000}
    assert topic_limits.max_message_bytes(kwargs, ["a", "b"]) == {"a": 20_000, "b": 30_000}
    assert asked == [["a", "b"], ["a"]]  # one request for all unknown topics; known: never again
    topic_limits.forget(kwargs, ["b"])  # a broker refused a batch within b's known limit
    assert topic_limits.max_message_bytes(kwargs, ["a", "b"]) == {"a": 20_000, "b": 40_000}
    assert asked[-1] == ["b"]
