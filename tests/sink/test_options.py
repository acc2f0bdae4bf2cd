"""Sink options: every way to ask for something exactly-once cannot give is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from unaligned.errors import OptionError, SinkConfigurationError
from unaligned.sink.options import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    FileTarget,
    KafkaTarget,
    SinkOptions,
)

CHECKPOINT = {"checkpointlocation": "/tmp/ck", "queryname": "q"}
KAFKA = {**CHECKPOINT, "kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out"}


def test_kafka_target_defaults() -> None:
    options = SinkOptions.parse(KAFKA)
    assert options.checkpoint_location == "/tmp/ck"
    assert options.query_name == "q"
    target = options.target
    assert isinstance(target, KafkaTarget)
    assert target.topic == "out"
    assert target.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    assert target.transactional_id_prefix is None
    kwargs = target.client_kwargs()
    assert kwargs["bootstrap_servers"] == ["127.0.0.1:9092"]
    assert kwargs["acks"] == "all"
    assert kwargs["enable_idempotence"] is True
    # kafka-python's own default is 60 s; the sink's default must reach the producer.
    assert kwargs["transaction_timeout_ms"] == DEFAULT_TRANSACTION_TIMEOUT_MS


def test_mixed_case_keys_and_pass_through() -> None:
    options = SinkOptions.parse(
        {
            "checkpointLocation": "/tmp/ck",
            "kafka.bootstrap.servers": "a:1,b:2",
            "kafka.linger.ms": "0",
            "kafka.compression.type": "lz4",
            "kafka.request.timeout.ms": "5000",
            "kafka.transaction.timeout.ms": "60000",
            "transactionalIdPrefix": "my-app",
            "chunkRows": "100",
        }
    )
    target = options.target
    assert isinstance(target, KafkaTarget)
    assert target.topic is None  # a topic column will be required by the schema check
    assert target.transactional_id_prefix == "my-app"
    assert options.chunk_rows == 100
    kwargs = target.client_kwargs()
    assert kwargs["linger_ms"] == 0
    assert kwargs["compression_type"] == "lz4"
    assert kwargs["request_timeout_ms"] == 5000
    assert kwargs["bootstrap_timeout_ms"] == 5000
    assert kwargs["transaction_timeout_ms"] == 60000


def test_file_target() -> None:
    options = SinkOptions.parse({**CHECKPOINT, "path": "s3://bucket/out", "compression": "ZSTD"})
    assert options.target == FileTarget(path="s3://bucket/out", compression="zstd")


@pytest.mark.parametrize(
    "options, names",
    [
        ({"queryname": "q", "path": "/tmp/o"}, "checkpointLocation"),
        ({**CHECKPOINT}, "path"),
        ({**CHECKPOINT, "topic": "t"}, "kafka.bootstrap.servers"),
        ({**KAFKA, "path": "/tmp/o"}, "path"),
        ({**CHECKPOINT, "path": "/tmp/o", "topic": "t"}, "topic"),
        ({**KAFKA, "kafka.enable.idempotence": "false"}, "kafka.enable.idempotence"),
        ({**KAFKA, "kafka.acks": "1"}, "kafka.acks"),
        ({**KAFKA, "kafka.transactional.id": "mine"}, "kafka.transactional.id"),
        ({**KAFKA, "kafka.value.serializer": "x"}, "kafka.value.serializer"),
        ({**KAFKA, "kafka.max.in.flight.requests.per.connection": "6"}, "max.in.flight"),
        ({**KAFKA, "topic": " "}, "topic"),
        ({**KAFKA, "transactionalidprefix": "a b"}, "transactionalIdPrefix"),
    ],
)
def test_refused_with_the_option_named(options: dict[str, str], names: str) -> None:
    """A sink that could not be exactly-once, or has no target: SinkConfigurationError."""
    with pytest.raises(SinkConfigurationError, match=names):
        SinkOptions.parse(options)


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {**KAFKA, "kafka.transaction.timeout.ms": "soon"},
            "option 'kafka.transaction.timeout.ms' must be a whole number, got 'soon'",
        ),
        (
            {**KAFKA, "kafka.transaction.timeout.ms": "0"},
            "option 'kafka.transaction.timeout.ms' must be a whole number >= 1, got '0'",
        ),
        ({**KAFKA, "chunkrows": "-5"}, "option 'chunkRows' must be a whole number >= 1"),
        ({**KAFKA, "minbatchestoretain": "0"}, "option 'minBatchesToRetain' must be"),
        ({**KAFKA, "maxinflightbytes": "lots"}, "option 'maxInflightBytes' must be a size"),
        ({**KAFKA, "alignedcheckpointtimeout": "soon"}, "option 'alignedCheckpointTimeout'"),
        ({**KAFKA, "checkpointmode": "loose"}, "option 'checkpointMode' must be one of"),
        ({**CHECKPOINT, "path": "/tmp/o", "compression": "rar"}, "option 'compression' must be"),
    ],
)
def test_malformed_values_refused_in_one_style(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as raised:
        SinkOptions.parse(options)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    "extra, names",
    [
        ({"kafka.isolation.level": "read_committed"}, "kafka.isolation.level"),
        ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"kafka.batch.size": "zero"}, "kafka.batch.size"),
    ],
)
def test_kafka_client_settings_refused_by_name(extra: dict[str, str], names: str) -> None:
    target = SinkOptions.parse({**KAFKA, **extra}).target
    assert isinstance(target, KafkaTarget)
    with pytest.raises(OptionError, match=names):
        target.client_kwargs()


def test_secrets_never_in_repr() -> None:
    options = SinkOptions.parse(
        {
            **KAFKA,
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": (
                'x.PlainLoginModule required username="u" password="hunter2";'
            ),
        }
    )
    assert "hunter2" not in repr(options)
    kwargs: dict[str, Any] = options.target.client_kwargs()  # type: ignore[union-attr]
    assert kwargs["sasl_plain_password"] == "hunter2"
