"""Which Kafka errors are asked again, the backoff between, and the one bound around them."""

from __future__ import annotations

import time

import kafka.errors as kafka_errors
import pytest

from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.retries import (
    MAX_BACKOFF_S,
    Backoff,
    call_until,
    is_retriable,
    needs_metadata,
)


def test_moved_leaders_lost_brokers_and_busy_coordinators_are_retriable() -> None:
    for error in (
        kafka_errors.NotLeaderForPartitionError,
        kafka_errors.KafkaConnectionError,
        kafka_errors.UnknownBrokerIdError,  # kafka-python: a broker the metadata lost
        kafka_errors.NodeNotReadyError,
        kafka_errors.RequestTimedOutError,
        kafka_errors.NotEnoughReplicasError,
        kafka_errors.NotEnoughReplicasAfterAppendError,
        kafka_errors.NotCoordinatorError,
        kafka_errors.CoordinatorLoadInProgressError,
        kafka_errors.ConcurrentTransactionsError,
        kafka_errors.NetworkExceptionError,
        kafka_errors.KafkaStorageError,
    ):
        assert is_retriable(error) and is_retriable(error()), error
    for error in (
        kafka_errors.TopicAuthorizationFailedError,
        kafka_errors.ProducerFencedError,
        kafka_errors.InvalidTxnStateError,
    ):
        assert not is_retriable(error), error


def test_only_metadata_errors_ask_for_new_leaders() -> None:
    assert needs_metadata(kafka_errors.NetworkExceptionError())
    assert needs_metadata(kafka_errors.UnknownBrokerIdError())
    assert needs_metadata(kafka_errors.NotCoordinatorError)
    assert not needs_metadata(kafka_errors.NotEnoughReplicasError())
    assert not needs_metadata(kafka_errors.ConcurrentTransactionsError)


def test_the_backoff_doubles_within_its_jitter_up_to_a_second_and_resets() -> None:
    backoff = Backoff(first_s=0.1)
    waits = [backoff.next() for _ in range(8)]
    for wait, nominal in zip(waits, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0], strict=True):
        assert nominal * 0.8 <= wait <= nominal * 1.2
    assert max(waits) <= MAX_BACKOFF_S * 1.2
    backoff.reset()
    assert backoff.next() <= 0.12


def test_call_until_asks_again_after_retriable_errors_and_tells_the_caller() -> None:
    seen: list[BaseException] = []
    answers: list[BaseException | str] = [
        kafka_errors.KafkaConnectionError("refused"),
        kafka_errors.NotCoordinatorError(),
        "done",
    ]

    def attempt(deadline: float) -> str:
        assert deadline > time.monotonic()
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    got = call_until(
        attempt,
        doing="asking",
        servers="b:1",
        timeout_ms=5_000,
        backoff=Backoff(first_s=0.001),
        on_retriable=seen.append,
    )
    assert got == "done" and [type(e) for e in seen] == [
        kafka_errors.KafkaConnectionError,
        kafka_errors.NotCoordinatorError,
    ]


def test_call_until_raises_a_refusal_at_once() -> None:
    calls = []

    def attempt(_deadline: float) -> None:
        calls.append(1)
        raise kafka_errors.TopicAuthorizationFailedError("t")

    with pytest.raises(kafka_errors.TopicAuthorizationFailedError):
        call_until(attempt, doing="asking", servers="b:1", timeout_ms=5_000)
    assert calls == [1]


def test_running_out_of_time_names_what_was_asked_the_servers_and_the_bound() -> None:
    def attempt(_deadline: float) -> None:
        raise kafka_errors.NodeNotReadyError("down")

    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError) as raised:
        call_until(
            attempt,
            doing="looking up offsets",
            servers="b:1,c:2",
            timeout_ms=300,
            backoff=Backoff(first_s=0.02),
        )
    message = str(raised.value)
    assert "looking up offsets" in message and "b:1,c:2" in message
    assert "kafka.default.api.timeout.ms=300" in message and "NodeNotReadyError" in message
    assert time.monotonic() - started < 2
