"""SourceOptions.parse: Spark's Kafka source options, and every rejection naming the option."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

from unaligned.errors import OffsetFormatError, OptionError
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.options import Assign, SourceOptions, Subscribe, SubscribePattern
from unaligned.source.planning.batch_sizing import UNCAPPED_ROWS
from unaligned.source.position_options import EarliestStart, LatestStart, NoMatchStrategy
from unaligned.source.stream_reader import KafkaStreamReader

BASE = {"subscribe": "events", "kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(**extra: Any) -> SourceOptions:
    options = dict(BASE)
    options.update({k.replace("__", "."): v for k, v in extra.items()})
    return SourceOptions.parse(options)


def test_defaults_match_spark() -> None:
    o = SourceOptions.parse(BASE)
    assert o.subscription == Subscribe(("events",))
    assert o.starting == LatestStart()
    assert o.fail_on_data_loss is True
    assert o.include_headers is False
    assert o.max_offsets_per_trigger is None and o.min_offsets_per_trigger is None
    assert o.max_trigger_delay_ms == 15 * 60 * 1000
    assert o.poll_timeout_ms == 120_000
    assert (o.fetch_offset_num_retries, o.fetch_offset_retry_interval_ms) == (3, 1000)
    assert o.no_match_strategy is NoMatchStrategy.ERROR
    assert o.kafka.bootstrap_servers == "127.0.0.1:9092"


def test_keys_are_case_insensitive() -> None:
    o = SourceOptions.parse(
        {
            "SUBSCRIBE": "a, b,,a",
            "Kafka.Bootstrap.Servers": "h1:1,h2:2",
            "MaxOffsetsPerTrigger": "10",
            "INCLUDEHEADERS": "TRUE",
            "startingoffsets": "EARLIEST",
        }
    )
    assert o.subscription == Subscribe(("a", "b"))
    assert o.kafka.bootstrap_servers == "h1:1,h2:2"
    assert o.max_offsets_per_trigger == 10
    assert o.include_headers is True
    assert o.starting == EarliestStart()


def test_the_same_key_twice_in_different_case_with_different_values_is_rejected() -> None:
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger"):
        SourceOptions.parse({**BASE, "maxOffsetsPerTrigger": "1", "maxoffsetspertrigger": "2"})


# --- subscription ---------------------------------------------------------------------------


def test_subscribe_pattern_and_assign() -> None:
    pattern = SourceOptions.parse(
        {"subscribePattern": "ev.*", "kafka.bootstrap.servers": "x:1"}
    ).subscription
    assert isinstance(pattern, SubscribePattern)
    assert (
        pattern.matches("events") and pattern.matches("my-events") and not pattern.matches("other")
    )
    assign = SourceOptions.parse(
        {"assign": '{"t": [1, 0]}', "kafka.bootstrap.servers": "x:1"}
    ).subscription
    assert assign == Assign((TopicPartitionId("t", 0), TopicPartitionId("t", 1)))


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"kafka.bootstrap.servers": "x:1"},
            "One of the options subscribe, subscribePattern, assign",
        ),
        (
            {"subscribe": "a", "assign": '{"a": [0]}', "kafka.bootstrap.servers": "x:1"},
            "Only one of the options",
        ),
        (
            {"subscribe": "a", "subscribePattern": "a", "kafka.bootstrap.servers": "x:1"},
            "Only one of the options",
        ),
        ({"subscribe": " , ", "kafka.bootstrap.servers": "x:1"}, "'subscribe' names no topics"),
        (
            {"subscribePattern": "  ", "kafka.bootstrap.servers": "x:1"},
            "'subscribePattern' is empty",
        ),
        (
            {"subscribePattern": "a(", "kafka.bootstrap.servers": "x:1"},
            "'subscribePattern' is not a valid regex",
        ),
        ({"assign": "a:0", "kafka.bootstrap.servers": "x:1"}, "'assign' must be JSON"),
        ({"subscribe": "a"}, "'kafka.bootstrap.servers' must be specified"),
    ],
)
def test_subscription_and_bootstrap_rejections_name_the_option(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(options)


def test_malformed_assign_json_is_an_offset_format_error() -> None:
    with pytest.raises(OffsetFormatError, match="assign"):
        SourceOptions.parse({"assign": '{"a": "0"}', "kafka.bootstrap.servers": "x:1"})


# --- starting and ending positions against the subscription ---------------------------------


def test_starting_offsets_must_name_exactly_the_assigned_partitions() -> None:
    base = {"assign": '{"t": [0, 1]}', "kafka.bootstrap.servers": "x:1"}
    SourceOptions.parse({**base, "startingOffsets": '{"t": {"0": 1, "1": -1}}'})
    with pytest.raises(OptionError, match="startingOffsets.*assigned: t-0, t-1.*named: t-0"):
        SourceOptions.parse({**base, "startingOffsets": '{"t": {"0": 1}}'})
    with pytest.raises(OptionError, match="startingOffsetsByTimestamp"):
        SourceOptions.parse({**base, "startingOffsetsByTimestamp": '{"t": {"0": 1, "2": 1}}'})


def test_ending_offsets_must_name_exactly_the_assigned_partitions() -> None:
    base = {"assign": '{"t": [0, 1]}', "kafka.bootstrap.servers": "x:1"}
    SourceOptions.parse({**base, "endingOffsets": '{"t": {"0": 1, "1": -1}}'})
    with pytest.raises(OptionError, match="endingOffsets.*assigned: t-0, t-1.*named: t-0"):
        SourceOptions.parse({**base, "endingOffsets": '{"t": {"0": 1}}'})
    with pytest.raises(OptionError, match="endingOffsetsByTimestamp"):
        SourceOptions.parse({**base, "endingOffsetsByTimestamp": '{"t": {"0": 1, "2": 1}}'})


# --- limits and the rest ------------------------------------------------------------------


def test_limits_and_accepted_spark_options() -> None:
    o = parse(
        maxOffsetsPerTrigger="100",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="30s",
        minPartitions="8",
        maxRecordsPerPartition="1000",
        failOnDataLoss="false",
        kafkaConsumer__pollTimeoutMs="5000",
        fetchOffset__numRetries="5",
        fetchOffset__retryIntervalMs="0",
        groupIdPrefix="spark-kafka-source",
    )
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (
        100,
        10,
        30_000,
    )
    assert (o.min_partitions, o.max_records_per_partition, o.fail_on_data_loss) == (8, 1000, False)
    assert (o.poll_timeout_ms, o.fetch_offset_num_retries, o.fetch_offset_retry_interval_ms) == (
        5000,
        5,
        0,
    )


@pytest.mark.parametrize(
    "text, ms",
    [
        ("15m", 900_000),
        ("500", 500),
        ("500ms", 500),
        ("2 s", 2000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("3min", 180_000),
    ],
)
def test_max_trigger_delay_takes_spark_time_strings(text: str, ms: int) -> None:
    assert parse(maxTriggerDelay=text).max_trigger_delay_ms == ms


@pytest.mark.parametrize(
    "key, value",
    [
        ("maxOffsetsPerTrigger", "0"),
        ("maxOffsetsPerTrigger", "lots"),
        ("minOffsetsPerTrigger", "-1"),
        ("minPartitions", "0"),
        ("maxRecordsPerPartition", "0"),
        ("maxTriggerDelay", "soon"),
        ("maxTriggerDelay", "5 weeks"),
        ("failOnDataLoss", "yes"),
        ("includeHeaders", "1"),
        ("kafkaConsumer.pollTimeoutMs", "0"),
        ("fetchOffset.numRetries", "0"),
        ("fetchOffset.retryIntervalMs", "-5"),
        ("startingOffsetsByTimestampStrategy", "earliest"),
    ],
)
def test_bad_values_name_the_option(key: str, value: str) -> None:
    with pytest.raises(OptionError, match=key.replace(".", r"\.")):
        SourceOptions.parse({**BASE, key: value})


def test_min_offsets_above_max_offsets_is_contradictory() -> None:
    with pytest.raises(
        OptionError,
        match=(
            "'minOffsetsPerTrigger' \\(20\\) is higher than option 'maxOffsetsPerTrigger' \\(10\\)"
        ),
    ):
        parse(minOffsetsPerTrigger="20", maxOffsetsPerTrigger="10")


def test_read_tasks_is_a_positive_count_and_excludes_the_splitting_options() -> None:
    assert parse(readTasks="4").read_tasks == 4
    assert parse().read_tasks is None  # chosen when the query first starts
    with pytest.raises(OptionError, match="readTasks"):
        parse(readTasks="0")
    for splitting in ("minPartitions", "maxRecordsPerPartition"):
        with pytest.raises(OptionError, match=f"'readTasks'.*'{splitting}'|set one or the other"):
            parse(readTasks="2", **{splitting: "10"})


def test_max_bytes_per_trigger_is_a_positive_size() -> None:
    assert parse(maxBytesPerTrigger="64MB").max_bytes_per_trigger == 64 * 1024 * 1024
    assert parse(maxBytesPerTrigger="1000").max_bytes_per_trigger == 1000
    assert parse().max_bytes_per_trigger is None
    for bad in ("0", "lots"):
        with pytest.raises(OptionError, match="maxBytesPerTrigger"):
            parse(maxBytesPerTrigger=bad)


def test_unknown_option_is_rejected_by_name() -> None:
    with pytest.raises(OptionError, match="unknown option 'maxOffsetPerTrigger'"):
        parse(maxOffsetPerTrigger="10")


def test_target_batch_duration_takes_a_duration() -> None:
    assert parse(targetBatchDuration="5s").target_batch_duration_ms == 5000
    assert parse().target_batch_duration_ms is None
    with pytest.raises(OptionError, match="'targetBatchDuration' must be a duration"):
        parse(targetBatchDuration="fast")


def test_sizes_and_durations_use_the_same_parsers_as_the_sink() -> None:
    options = SourceOptions.parse(
        {
            **BASE,
            "kafkaConsumer.pollTimeoutMs": "2m",
            "fetchOffset.retryIntervalMs": "1s",
            "kafka.max.partition.fetch.bytes": "4MB",
            "kafka.fetch.max.bytes": "64MiB",
            "kafka.request.timeout.ms": "45s",
        }
    )
    assert options.poll_timeout_ms == 120_000
    assert options.fetch_offset_retry_interval_ms == 1000
    kwargs = options.kafka.consumer_kwargs()
    assert kwargs["max_partition_fetch_bytes"] == 4 * 1024 * 1024
    assert kwargs["fetch_max_bytes"] == 64 * 1024 * 1024
    assert kwargs["request_timeout_ms"] == 45_000
    with pytest.raises(OptionError, match="option 'kafka.fetch.max.bytes' must be a size like"):
        parse(kafka__fetch__max__bytes="big")


# --- kafka.* ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "auto.offset.reset",
        "key.deserializer",
        "value.deserializer",
        "enable.auto.commit",
        "interceptor.classes",
    ],
)
def test_kafka_options_spark_rejects_are_rejected_by_name(key: str) -> None:
    with pytest.raises(OptionError, match=f"'kafka.{key}' is not supported"):
        SourceOptions.parse({**BASE, f"kafka.{key}": "x"})


def test_kafka_group_id_is_allowed_as_in_spark() -> None:
    assert parse(kafka__group__id="my-group").kafka.client_kwargs["group_id"] == "my-group"


def test_unknown_kafka_option_is_rejected_by_name() -> None:
    with pytest.raises(OptionError, match="'kafka.ssl.cipher.suites' is not supported"):
        SourceOptions.parse({**BASE, "kafka.ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})


def test_secret_values_never_show_in_repr_or_errors() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="svc" password="hunter2";'
    )
    o = SourceOptions.parse(
        {
            **BASE,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
        }
    )
    assert "hunter2" not in repr(o) and "hunter2" not in str(o)
    assert o.kafka.consumer_kwargs()["sasl_plain_password"] == "hunter2"
    with pytest.raises(OptionError) as excinfo:
        SourceOptions.parse(
            {**BASE, "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas}
        )
    assert "hunter2" not in str(excinfo.value)
    assert "kafka.sasl.jaas.config" in str(excinfo.value)


# --- read limits the reader reports to Spark --------------------------------------------------


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, ReadMaxRows(UNCAPPED_ROWS)),  # uncapped, so the sink's backlog may size a batch
        ({"maxOffsetsPerTrigger": "500"}, ReadMaxRows(500)),
        ({"minOffsetsPerTrigger": "50"}, ReadMinRows(50)),
        # pyspark has no composite limit: max is reported, min is applied from the options
        ({"maxOffsetsPerTrigger": "500", "minOffsetsPerTrigger": "50"}, ReadMaxRows(500)),
        # targetBatchDuration sizes batches in latestOffset; it needs a limit other than ReadAll
        ({"targetBatchDuration": "5s"}, ReadMaxRows(UNCAPPED_ROWS)),
    ],
)
def test_default_read_limit(extra: dict[str, str], expected: object) -> None:
    reader = KafkaStreamReader(SourceOptions.parse({**BASE, **extra}))  # no connection is made
    assert reader.getDefaultReadLimit() == expected
    no_token = KafkaSourceOffset({}, 0, None)
    assert reader.planning._idle_barrier_due(no_token) is False


def test_schema_registry_formats_are_source_options() -> None:
    options = SourceOptions.parse(
        {
            **BASE,
            "valueFormat": "avro-confluent",
            "schema.registry.url": "http://registry:8081",
            "mode": "PERMISSIVE",
        }
    )
    assert options.formats is not None and options.formats.value is not None
    assert options.topics == ("events",)
    assert SourceOptions.parse(BASE).formats is None
    with pytest.raises(OptionError, match="'valueSubjectNameStrategy' needs option 'valueFormat'"):
        SourceOptions.parse({**BASE, "valueSubjectNameStrategy": "record"})
