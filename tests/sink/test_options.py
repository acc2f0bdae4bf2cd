"""Sink options: every way to ask for something exactly-once cannot give is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from unaligned.errors import OptionError, SinkConfigurationError
from unaligned.sink.kafka_target import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    DeliveryGuarantee,
    KafkaTarget,
    TwoPhaseCommitMode,
)
from unaligned.sink.options import FileTarget, SinkOptions

CHECKPOINT = {"checkpointlocation": "/tmp/ck", "queryname": "q"}
KAFKA = {**CHECKPOINT, "kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out"}


def test_kafka_target_defaults() -> None:
    options = SinkOptions.parse(KAFKA)
    assert options.checkpoint.location == "/tmp/ck"
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


@pytest.mark.parametrize(
    ("raw", "mode"),
    [
        (None, TwoPhaseCommitMode.AUTO),
        ("AUTO", TwoPhaseCommitMode.AUTO),
        ("true", TwoPhaseCommitMode.ON),
        (" False ", TwoPhaseCommitMode.OFF),
    ],
)
def test_two_phase_commit_is_auto_unless_set_and_never_reaches_kafka_python(
    raw: str | None, mode: TwoPhaseCommitMode
) -> None:
    given = dict(KAFKA)
    if raw is not None:
        given["kafka.transaction.two.phase.commit.enable"] = raw
    target = SinkOptions.parse(given).target
    assert isinstance(target, KafkaTarget) and target.two_phase_commit is mode
    assert not any("two" in key for key in target.client_kwargs())  # resolved at query start


def test_two_phase_commit_takes_auto_true_or_false_only() -> None:
    given = {**KAFKA, "kafka.transaction.two.phase.commit.enable": "maybe"}
    with pytest.raises(OptionError, match="kafka.transaction.two.phase.commit.enable"):
        SinkOptions.parse(given)


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
    assert options.target.retention_ms is None
    assert options.target.log_compact_interval == 10  # Spark's default
    assert options.target.merge_files_below == 0


def test_file_target_retention_log_interval_and_merging() -> None:
    options = SinkOptions.parse(
        {
            **CHECKPOINT,
            "path": "/tmp/o",
            "retention": "7d",
            "logcompactinterval": "25",
            "mergefilesbelow": "64MB",
        }
    )
    assert options.target == FileTarget(
        path="/tmp/o",
        compression="snappy",
        retention_ms=7 * 86_400_000,
        log_compact_interval=25,
        merge_files_below=64 << 20,
    )


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
            "option 'kafka.transaction.timeout.ms' must be a duration like 500ms, 30s, 15m or 1h, "
            "got 'soon'",
        ),
        (
            {**KAFKA, "kafka.transaction.timeout.ms": "0"},
            "option 'kafka.transaction.timeout.ms' must be a duration of at least 1 ms, got '0'",
        ),
        ({**KAFKA, "chunkrows": "-5"}, "option 'chunkRows' must be a whole number >= 1"),
        ({**KAFKA, "minbatchestoretain": "0"}, "option 'minBatchesToRetain' must be"),
        ({**KAFKA, "maxinflightbytes": "lots"}, "option 'maxInflightBytes' must be a size"),
        (
            {**KAFKA, "maxunacknowledgedbytes": "lots"},
            "option 'maxUnacknowledgedBytes' must be a size",
        ),
        ({**KAFKA, "maxunacknowledgedbytes": "0"}, "option 'maxUnacknowledgedBytes' must be"),
        ({**KAFKA, "alignedcheckpointtimeout": "soon"}, "option 'alignedCheckpointTimeout'"),
        ({**KAFKA, "checkpointmode": "loose"}, "option 'checkpointMode' must be one of"),
        ({**CHECKPOINT, "path": "/tmp/o", "compression": "rar"}, "option 'compression' must be"),
        ({**CHECKPOINT, "path": "/tmp/o", "retention": "0"}, "option 'retention' must be a"),
        ({**CHECKPOINT, "path": "/tmp/o", "logcompactinterval": "0"}, "option 'logCompactInt"),
        ({**CHECKPOINT, "path": "/tmp/o", "mergefilesbelow": "big"}, "option 'mergeFilesBelow'"),
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


@pytest.mark.parametrize(
    "typo, spelled",
    [("alignedcheckpointtimout", "alignedCheckpointTimout"), ("checkpointmod", "checkpointMod")],
)
def test_unknown_option_refused_with_the_known_ones(typo: str, spelled: str) -> None:
    with pytest.raises(SinkConfigurationError) as raised:
        SinkOptions.parse({**KAFKA, spelled: "x"})
    message = str(raised.value)
    assert message.startswith(f"unknown option '{spelled}' for the unaligned sink; known options: ")
    for known in (
        "alignedCheckpointTimeout",
        "checkpointMode",
        "maxUnacknowledgedBytes",
        "kafka.*",
    ):
        assert known in message


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {**KAFKA, "compression": "zstd"},
            "option 'compression' applies to the file, Iceberg, Delta sinks only",
        ),
        ({**KAFKA, "retention": "1h"}, "option 'retention' applies to the file sink only"),
        (
            {**CHECKPOINT, "path": "/tmp/o", "transactionalIdPrefix": "p"},
            "option 'transactionalIdPrefix' applies to the Kafka sink only",
        ),
    ],
)
def test_option_of_the_other_target_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(SinkConfigurationError, match=message):
        SinkOptions.parse(options)


def test_every_size_option_takes_the_same_spellings() -> None:
    """The docs' own `4MB`, `64KB`, `256MB` and `kafka.batch.size 1MB` all parse, as powers of 2."""
    options = SinkOptions.parse(
        {
            **KAFKA,
            "maxUnacknowledgedBytes": "64KB",
            "maxInflightBytes": "4MiB",
            "channelStateInlineThreshold": "20k",
            "kafka.batch.size": "1MB",
            "kafka.max.request.size": "2m",
            "kafka.linger.ms": "1s",
            "kafka.transaction.timeout.ms": "10m",
        }
    )
    target = options.target
    assert isinstance(target, KafkaTarget)
    assert target.max_unacknowledged_bytes == 64 * 1024
    assert options.alignment.max_inflight_bytes == 4 * 1024 * 1024
    assert options.alignment.inline_threshold_bytes == 20 * 1024
    assert target.transaction_timeout_ms == 600_000
    kwargs = target.client_kwargs()
    assert kwargs["batch_size"] == 1024 * 1024
    assert kwargs["max_request_size"] == 2 * 1024 * 1024
    assert kwargs["linger_ms"] == 1000
    assert kwargs["transaction_timeout_ms"] == 600_000


def test_secrets_never_in_repr() -> None:
    options = SinkOptions.parse(
        {
            **KAFKA,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": (
                'x.PlainLoginModule required username="u" password="hunter2";'
            ),
        }
    )
    assert "hunter2" not in repr(options)
    kwargs: dict[str, Any] = options.target.client_kwargs()  # type: ignore[union-attr]
    assert kwargs["sasl_plain_password"] == "hunter2"


def test_schema_registry_formats_are_kafka_sink_options() -> None:
    registry = {"valueformat": "avro-confluent", "schema.registry.url": "http://r:8081"}
    target = SinkOptions.parse({**KAFKA, **registry, "autoRegisterSchemas": "false"}).target
    assert isinstance(target, KafkaTarget)
    assert target.formats is not None and not target.formats.auto_register
    with pytest.raises(SinkConfigurationError, match="applies to the Kafka sink only"):
        SinkOptions.parse({**CHECKPOINT, "path": "/tmp/out", **registry})


@pytest.mark.parametrize(
    ("raw", "guarantee"),
    [
        (None, DeliveryGuarantee.EXACTLY_ONCE),
        ("exactly-once", DeliveryGuarantee.EXACTLY_ONCE),
        ("AT_LEAST_ONCE", DeliveryGuarantee.AT_LEAST_ONCE),
        ("at-least-once", DeliveryGuarantee.AT_LEAST_ONCE),
    ],
)
def test_delivery_guarantee(raw: str | None, guarantee: DeliveryGuarantee) -> None:
    options = {**KAFKA} if raw is None else {**KAFKA, "deliveryGuarantee": raw}
    target = SinkOptions.parse(options).target
    assert isinstance(target, KafkaTarget) and target.delivery_guarantee is guarantee


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"deliveryGuarantee": "none"},
            "deliveryGuarantee' must be one of 'exactly-once', 'at-least-once'",
        ),
        (
            {"deliveryGuarantee": "at-least-once", "transactionalIdPrefix": "p"},
            "'transactionalIdPrefix' applies to deliveryGuarantee=exactly-once only",
        ),
        (
            {"deliveryGuarantee": "at-least-once", "kafka.transaction.timeout.ms": "60000"},
            "'kafka.transaction.timeout.ms' applies to deliveryGuarantee=exactly-once only",
        ),
        (
            {
                "deliveryGuarantee": "at-least-once",
                "kafka.transaction.two.phase.commit.enable": "true",
            },
            "'kafka.transaction.two.phase.commit.enable' applies to",
        ),
        (
            {"deliveryGuarantee": "at-least-once", "kafka.enable.idempotence": "false"},
            "both delivery guarantees write with the idempotent producer",
        ),
    ],
)
def test_at_least_once_refuses_what_only_transactions_read(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        SinkOptions.parse({**KAFKA, **extra})


def test_delivery_guarantee_is_a_kafka_option() -> None:
    with pytest.raises(SinkConfigurationError, match="'deliveryGuarantee' applies to the Kafka"):
        SinkOptions.parse({**CHECKPOINT, "path": "/tmp/out", "deliveryGuarantee": "at-least-once"})
