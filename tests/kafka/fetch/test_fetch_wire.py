"""``Fetch`` v11 bytes: our request against kafka-python's encoding of the same request, and our
in-place parse of responses kafka-python encodes (aborted transactions, null records, errors)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from unaligned.errors import RecordDecodeError
from unaligned.kafka.fetch.fetch_wire import (
    AbortedTransaction,
    PartitionFetch,
    encode_fetch_request,
    parse_fetch_response,
    response_correlation_id,
)


@pytest.mark.parametrize(("epochs", "rack"), [((-1, -1), ""), ((4, 17), "eu-west-1a")])
def test_the_request_is_byte_for_byte_kafka_pythons_v11(epochs: tuple[int, int], rack: str) -> None:
    """Leader epochs (KIP-320) and the client's rack (KIP-392) included."""
    ours = encode_fetch_request(
        7,
        "me",
        [
            ("t", [PartitionFetch(0, 100, 4096, epochs[0]), PartitionFetch(3, 5, 1, epochs[1])]),
            ("u", []),
        ],
        max_wait_ms=250,
        max_bytes=1 << 20,
        read_committed=True,
        rack_id=rack,
    )
    topic = FetchRequest.FetchTopic
    theirs = FetchRequest[11](
        replica_id=-1,
        max_wait_ms=250,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            topic(
                topic="t",
                partitions=[
                    topic.FetchPartition(
                        partition=p,
                        current_leader_epoch=e,
                        fetch_offset=o,
                        log_start_offset=-1,
                        partition_max_bytes=b,
                    )
                    for p, o, b, e in ((0, 100, 4096, epochs[0]), (3, 5, 1, epochs[1]))
                ],
            ),
            topic(topic="u", partitions=[]),
        ],
        forgotten_topics_data=[],
        rack_id=rack,
    )
    theirs.with_header(correlation_id=7, client_id="me")
    assert ours == theirs.encode(framed=True, header=True)


def response_bytes(partitions: list[dict[str, object]], *, correlation_id: int = 9) -> bytes:
    partition = FetchResponse.FetchableTopicResponse.PartitionData
    response = FetchResponse[11](
        throttle_time_ms=3,
        error_code=0,
        session_id=0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="events", partitions=[partition(**p) for p in partitions]
            )
        ],
    )
    body = response.encode()
    return struct.pack(">i", correlation_id) + body


def partition_fields(index: int, **overrides: object) -> dict[str, object]:
    fields: dict[str, object] = dict(
        partition_index=index,
        error_code=0,
        high_watermark=1000 + index,
        last_stable_offset=900 + index,
        log_start_offset=index,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"batch-bytes-%d" % index,
    )
    fields.update(overrides)
    return fields


def test_a_response_kafka_python_encodes_parses_in_place() -> None:
    aborted_type = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
    frame = memoryview(
        bytearray(
            response_bytes(
                [
                    partition_fields(0),
                    partition_fields(
                        1,
                        aborted_transactions=[
                            aborted_type(producer_id=5, first_offset=10),
                            aborted_type(producer_id=6, first_offset=20),
                        ],
                    ),
                    partition_fields(2, error_code=1, records=None),
                    partition_fields(3, preferred_read_replica=2),
                ]
            )
        )
    )
    assert response_correlation_id(frame) == 9
    response = parse_fetch_response(frame)
    assert response.throttle_time_ms == 3 and response.error_code == 0
    (topic,) = response.responses
    assert topic.topic == "events"
    first, second, third, fourth = topic.partitions
    assert (first.partition_index, first.high_watermark, first.last_stable_offset) == (0, 1000, 900)
    assert first.log_start_offset == 0 and first.aborted_transactions is None
    assert first.records is not None and bytes(first.records) == b"batch-bytes-0"
    assert first.records.obj is frame.obj  # a slice of the received buffer, not a copy
    assert second.aborted_transactions == (AbortedTransaction(5, 10), AbortedTransaction(6, 20))
    assert (third.error_code, third.records) == (1, None)
    assert first.preferred_read_replica == -1 and fourth.preferred_read_replica == 2


def test_a_truncated_response_is_a_decode_error_not_a_short_read() -> None:
    whole = response_bytes([partition_fields(0)])
    with pytest.raises(RecordDecodeError, match="ended inside a field"):
        parse_fetch_response(memoryview(whole[:-3]))
