"""The options of ``spark.readStream.format("unaligned")``, one declaration each.

Each :class:`~unaligned.options.declaration.OptionSpec` holds an option's name (Spark's Kafka
source spelling), its default, its parser, the :class:`~unaligned.source.options.SourceOptions`
field it sets and what it means; the reference page docs/reference/source-options.md is generated
from :data:`SOURCE_OPTIONS`. Starting and ending positions are declared beside their parsers in
:mod:`unaligned.source.position_options`, the Schema Registry's in
:mod:`unaligned.registry.option_specs`. Checking the options against each other is
:class:`~unaligned.source.options.SourceOptions`' job.
"""

from __future__ import annotations

from typing import Any

from unaligned.options.declaration import OptionSet, OptionSpec, text
from unaligned.options.parsing import (
    KAFKA_PREFIX,
    parse_bool,
    parse_bytes,
    parse_duration_ms,
    parse_positive,
)
from unaligned.registry.option_specs import REGISTRY_PREFIX, REGISTRY_SOURCE_SPECS
from unaligned.source.position_options import ENDING_SPECS, STARTING_SPECS, parse_no_match


def _positive_ms(name: str, raw: str) -> int:
    return parse_duration_ms(name, raw, minimum=1)


SUBSCRIPTION_SPECS: tuple[OptionSpec[Any], ...] = tuple(
    OptionSpec(name, meaning, default_text="(exactly one)", sets="subscription")
    for name, meaning in (
        ("subscribe", "comma-separated topics"),
        ("subscribePattern", "a regex: every topic it finds a match in (new topics picked up)"),
        ("assign", 'JSON `{"topic":[0,1]}`: exactly these partitions'),
    )
)
SUBSCRIPTION_NAMES = {s.key: s.name for s in SUBSCRIPTION_SPECS}

KAFKA_SPECS: tuple[OptionSpec[Any], ...] = (
    OptionSpec("kafka.bootstrap.servers", "the cluster", default_text="(required)"),
    OptionSpec(
        "kafka.*",
        "passed to the Kafka client in Java's names; logging in (TLS, SASL, OAuth, MSK IAM, "
        "Kerberos, key stores): [Security](../guides/security.md); secret values are never logged",
    ),
    OptionSpec(
        "kafka.default.api.timeout.ms",
        "how long a driver-side look-up (topics, offsets) keeps asking through a lost broker or "
        "a moved leader, as Kafka's Java clients do: "
        "[Kafka clusters that lose brokers](../concepts/guarantees.md#lost-brokers)",
        default="60000",
    ),
    OptionSpec(
        "kafka.client.rack",
        "the client's rack (KIP-392): with a broker `replica.selector.class`, read tasks read "
        "from the replica the leader names (a follower in the same zone)",
    ),
    OptionSpec(
        "kafka.group.id",
        "**monitoring only**: after each batch the source commits the batch's end offsets to "
        "this consumer group, so Kafka's lag tools show the query's lag; the checkpoint, never "
        "the group, says where a restart resumes",
    ),
)


def _positive_bytes(name: str, raw: str) -> int:
    return parse_bytes(name, raw, minimum=1)


READ_SPECS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        "startingOffsetsByTimestampStrategy",
        "`error` or `latest`: what a partition with no record at or after the start time does",
        parse_no_match,
        default="error",
        sets="no_match_strategy",
    ),
    OptionSpec(
        "maxOffsetsPerTrigger",
        "at most this many records per batch (`Trigger.AvailableNow` reads everything, in "
        "batches of this size)",
        parse_positive,
        sets="max_offsets_per_trigger",
    ),
    OptionSpec(
        "maxBytesPerTrigger",
        "at most this many key and value bytes per batch (`64MB`; Spark's `ReadMaxBytes`), "
        "over by at most one record per partition: each partition's share is found by reading "
        "its range ([Rescaling and batch size](../guides/rescaling.md))",
        _positive_bytes,
        sets="max_bytes_per_trigger",
    ),
    OptionSpec(
        "minOffsetsPerTrigger",
        "wait for at least this many records before a batch, but no longer than `maxTriggerDelay`",
        parse_positive,
        sets="min_offsets_per_trigger",
    ),
    OptionSpec(
        "maxTriggerDelay",
        "the longest a batch waits for `minOffsetsPerTrigger`",
        parse_duration_ms,
        default="15m",
        sets="max_trigger_delay_ms",
    ),
    OptionSpec(
        "readTasks",
        "read tasks per batch; each reads several topic-partitions over one set of "
        "connections ([Read tasks](../guides/reading-kafka.md#read-tasks)); not with "
        "`minPartitions` / `maxRecordsPerPartition`",
        parse_positive,
        default_text="the cores of the host that starts the query",
        sets="read_tasks",
    ),
    OptionSpec(
        "minPartitions",
        "split large ranges into more tasks, one task per piece (as in Spark)",
        parse_positive,
        sets="min_partitions",
    ),
    OptionSpec(
        "maxRecordsPerPartition",
        "split a topic-partition's range into tasks of at most this many records",
        parse_positive,
        sets="max_records_per_partition",
    ),
    OptionSpec(
        "targetBatchDuration",
        "size each batch from the throughput of earlier ones so it takes about this long (for "
        "a slow transformation before the sink, which no barrier can overtake)",
        parse_duration_ms,
        sets="target_batch_duration_ms",
    ),
    OptionSpec(
        "includeHeaders", "add the `headers` column", parse_bool, "false", sets="include_headers"
    ),
    OptionSpec(
        "failOnDataLoss",
        "offsets gone to retention, or a deleted or re-created topic, stop the query; `false`: "
        "warn and go on from the earliest offset available",
        parse_bool,
        "true",
        sets="fail_on_data_loss",
    ),
    OptionSpec(
        "kafkaConsumer.pollTimeoutMs",
        "how long a read task waits for records it knows exist",
        _positive_ms,
        "120000",
        sets="poll_timeout_ms",
    ),
    OptionSpec(
        "fetchOffset.numRetries",
        "offset look-ups the broker refused, asked again this many times (as in Spark)",
        parse_positive,
        "3",
        sets="fetch_offset_num_retries",
    ),
    OptionSpec(
        "fetchOffset.retryIntervalMs",
        "the pause between those look-ups",
        parse_duration_ms,
        "1000",
        sets="fetch_offset_retry_interval_ms",
    ),
    OptionSpec(
        "groupIdPrefix",
        "**monitoring only**: commit the end offsets to group `<groupIdPrefix>-<barrierToken>` "
        "(one per query, stable across restarts) instead of `kafka.group.id`",
        text,
        sets="group_id_prefix",
    ),
)

#: Every option of ``readStream.format("unaligned")``, in the order the reference lists them.
SOURCE_OPTIONS = OptionSet(
    "source",
    (
        *SUBSCRIPTION_SPECS,
        *KAFKA_SPECS,
        *STARTING_SPECS,
        *ENDING_SPECS,
        *READ_SPECS,
        *REGISTRY_SOURCE_SPECS,
    ),
)
#: The names an unknown-option error lists (``kafka.*`` and ``schema.registry.*`` collapsed).
KNOWN_OPTION_NAMES: tuple[str, ...] = SOURCE_OPTIONS.names(collapse=(KAFKA_PREFIX, REGISTRY_PREFIX))
