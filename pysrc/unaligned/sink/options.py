"""Options of ``df.writeStream.format("unaligned")``, parsed and checked before any data moves.

Spark hands the stream writer the user's options with lower-cased keys, plus
``checkpointlocation`` (resolved once into a :class:`~unaligned.checkpoint.Checkpoint`) and
``queryname``. Exactly one target is chosen: Kafka (``kafka.bootstrap.servers`` and a ``topic``
option or column; other ``kafka.*`` options pass to the producer, those that would break
exactly-once are refused; ``deliveryGuarantee`` ``exactly-once``, transactions, or
``at-least-once``, an idempotent producer without them), files (``path``), or an Iceberg or
Delta table (``tableFormat`` and ``path``: :mod:`unaligned.sink.table_target`). An unknown
option, or one only another target reads, is refused naming it; sizes and durations go through
:mod:`unaligned.options.parsing`, the Kafka target's own checks are
:mod:`unaligned.sink.kafka_target`.
Every option is declared once (:class:`~unaligned.options.declaration.OptionSpec`: name,
default, parser, target, meaning) here, in :mod:`unaligned.sink.kafka_target` and in
:mod:`unaligned.sink.table_target`;
:data:`SINK_OPTIONS` joins them with the Schema Registry's, and docs/reference/sink-options.md
is generated from it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from unaligned._util.fs import absolute_path
from unaligned.barriers.alignment import AlignmentSettings, CheckpointMode
from unaligned.channel_state.codecs import check_codec
from unaligned.checkpoint import Checkpoint
from unaligned.errors import SinkConfigurationError
from unaligned.options.declaration import OptionSet, OptionSpec, text
from unaligned.options.parsing import (
    KAFKA_PREFIX,
    kafka_params,
    parse_bytes,
    parse_choice,
    parse_duration_ms,
    parse_positive,
)
from unaligned.registry.option_specs import REGISTRY_PREFIX, REGISTRY_SINK_SPECS
from unaligned.registry.options import is_format_option
from unaligned.sink.kafka_target import KAFKA_SPECS, TOPIC, KafkaTarget, parse_kafka_target
from unaligned.sink.table_target import (
    KEEP_SNAPSHOTS,
    TABLE_SPECS,
    TABLE_TIMEOUT,
    TableTarget,
    is_table_option,
    parse_table_target,
    table_format,
)

PARQUET_COMPRESSIONS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")


def _positive_ms(name: str, raw: str) -> int:
    return parse_duration_ms(name, raw, minimum=1)


def _compression(name: str, raw: str) -> str:
    return parse_choice(name, raw, PARQUET_COMPRESSIONS)


def _mode(name: str, raw: str) -> CheckpointMode:
    return CheckpointMode(parse_choice(name, raw, [m.value for m in CheckpointMode]))


def _codec(name: str, raw: str) -> str:
    codec = raw.strip().lower()
    check_codec(codec)
    return codec


CHECKPOINT_LOCATION: OptionSpec[str] = OptionSpec(
    "checkpointLocation",
    "Spark's checkpoint; the sink keeps its commit records, channel state and metrics under "
    "`<checkpoint>/unaligned/`",
    text,
    default_text="(required)",
)
QUERY_NAME: OptionSpec[str] = OptionSpec(
    "queryName", "set by Spark from `queryName(...)`; shown in the sink's log lines", text
)
PATH: OptionSpec[str] = OptionSpec(
    "path",
    "write Parquet files here (any `pyarrow.fs` filesystem: local, HDFS, S3); with "
    "`tableFormat`, the table: a Delta table's location, an Iceberg table's `namespace.table`",
    text,
    only_for=("file", "Iceberg", "Delta"),
)
COMPRESSION: OptionSpec[str] = OptionSpec(
    "compression",
    "the Parquet codec: " + ", ".join(f"`{c}`" for c in PARQUET_COMPRESSIONS),
    _compression,
    "snappy",
    only_for=("file", "Iceberg", "Delta"),
)
RETENTION: OptionSpec[int] = OptionSpec(
    "retention",
    "a batch decided longer ago than this (`7d`, `12h`) leaves the manifest and "
    "`_spark_metadata` at their next compaction; its files stay on disk "
    "([Reading the output](../guides/files.md#reading-the-output))",
    _positive_ms,
    default_text="(none: kept for ever)",
    only_for="file",
)
LOG_COMPACT_INTERVAL: OptionSpec[int] = OptionSpec(
    "logCompactInterval",
    "`_spark_metadata` compacts every this many entries, as Spark's "
    "`spark.sql.streaming.fileSink.log.compactInterval` (set both alike)",
    parse_positive,
    "10",
    only_for="file",
)
MERGE_FILES_BELOW: OptionSpec[int] = OptionSpec(
    "mergeFilesBelow",
    "a batch whose files total at most this size (`64MB`) is merged into one file before the "
    "decision, published by one rename "
    "([Reading the output](../guides/files.md#reading-the-output))",
    parse_bytes,
    "0",
    only_for="file",
)
CHUNK_ROWS: OptionSpec[int] = OptionSpec(
    "chunkRows",
    "the smallest chunk a task writes between two barrier checks (far from the deadline, "
    "bigger ones)",
    parse_positive,
    "1000",
)
MIN_BATCHES_TO_RETAIN: OptionSpec[int] = OptionSpec(
    "minBatchesToRetain", "commit records kept", parse_positive, "100"
)
CHECKPOINT_MODE: OptionSpec[CheckpointMode] = OptionSpec(
    "checkpointMode",
    "`unaligned`: past the timeout a task spills the rest of its input as channel state; "
    "`aligned`: every row is written before the batch commits (Spark's behaviour)",
    _mode,
    CheckpointMode.UNALIGNED.value,
)
ALIGNED_CHECKPOINT_TIMEOUT: OptionSpec[int] = OptionSpec(
    "alignedCheckpointTimeout",
    "measured from the batch start; past it a task spills the rest of its input "
    "([Sizing](../operations/sizing.md))",
    parse_duration_ms,
    "30s",
)
MAX_INFLIGHT_BYTES: OptionSpec[int] = OptionSpec(
    "maxInflightBytes",
    "a task whose pending channel state is above this does not cut again until it drains",
    parse_bytes,
    "256MB",
)
CHANNEL_STATE_CODEC: OptionSpec[str] = OptionSpec(
    "channelStateCodec", "`null`, `deflate`, `snappy` or `zstandard`", _codec, "deflate"
)
CHANNEL_STATE_INLINE_THRESHOLD: OptionSpec[int] = OptionSpec(
    "channelStateInlineThreshold",
    "smaller channel state goes into the commit record instead of a file",
    parse_bytes,
    "20KB",
)
CHANNEL_STATE_PATH: OptionSpec[str] = OptionSpec(
    "channelStatePath",
    "where channel state is written: any `pyarrow.fs` URI",
    text,
    default_text="`<checkpoint>/unaligned/channel-state`",
)
CHANNEL_STATE_MAX_FILES: OptionSpec[int] = OptionSpec(
    "channelStateMaxFiles",
    "at most this many pending channel-state files per task: at a cut the newest carried "
    "ones beyond it are merged into the new state (order kept)",
    parse_positive,
    "8",
)
CHANNEL_STATE_MERGE_BELOW: OptionSpec[int] = OptionSpec(
    "channelStateMergeBelow",
    "pending state smaller than this is merged into one file at each cut instead of carried "
    "by reference",
    parse_bytes,
    "16MB",
)


class PendingPolicy(enum.Enum):
    """``pendingStateOnRescale``: channel state pending for another sink task layout
    (:mod:`unaligned.sink.pending_layout`)."""

    REFUSE = "refuse"
    """The batch is not decided, naming the pending state and the way out (default)."""
    REASSIGN = "reassign"
    """State of a vanished task index moves to task ``index mod n``: order may break."""


def _pending_policy(name: str, raw: str) -> PendingPolicy:
    return PendingPolicy(parse_choice(name, raw.strip().lower(), [p.value for p in PendingPolicy]))


PENDING_STATE_ON_RESCALE: OptionSpec[PendingPolicy] = OptionSpec(
    "pendingStateOnRescale",
    "channel state pending for a sink task layout the new one cannot map (a shuffle before "
    "the sink whose task count changed): `refuse` the batch, naming the way out, or "
    "`reassign` it to task `index mod n` where order cannot matter (no `key` column) "
    "([Rescaling](../guides/rescaling.md))",
    _pending_policy,
    PendingPolicy.REFUSE.value,
)
#: Every option of ``writeStream.format("unaligned")``, in the order the reference lists them.
SINK_OPTIONS = OptionSet(
    "sink",
    (
        CHECKPOINT_LOCATION,
        QUERY_NAME,
        *KAFKA_SPECS,
        PATH,
        COMPRESSION,
        RETENTION,
        LOG_COMPACT_INTERVAL,
        MERGE_FILES_BELOW,
        *TABLE_SPECS,
        KEEP_SNAPSHOTS,
        TABLE_TIMEOUT,
        CHECKPOINT_MODE,
        ALIGNED_CHECKPOINT_TIMEOUT,
        MAX_INFLIGHT_BYTES,
        CHUNK_ROWS,
        MIN_BATCHES_TO_RETAIN,
        CHANNEL_STATE_CODEC,
        CHANNEL_STATE_INLINE_THRESHOLD,
        CHANNEL_STATE_PATH,
        CHANNEL_STATE_MAX_FILES,
        CHANNEL_STATE_MERGE_BELOW,
        PENDING_STATE_ON_RESCALE,
        *REGISTRY_SINK_SPECS,
    ),
)
#: The names an unknown-option error lists (``kafka.*`` and ``schema.registry.*`` collapsed).
KNOWN_OPTION_NAMES: tuple[str, ...] = SINK_OPTIONS.names(collapse=(KAFKA_PREFIX, REGISTRY_PREFIX))
DEFAULT_COMPACT_INTERVAL = LOG_COMPACT_INTERVAL.value({})
"""Spark's ``spark.sql.streaming.fileSink.log.compactInterval`` default."""


@dataclass(frozen=True)
class FileTarget:
    """Write Parquet files under ``path`` (a URI or local path).

    ``retention_ms``: batches decided longer ago leave the manifest and ``_spark_metadata`` at
    their next compaction (``None``: kept for ever). ``log_compact_interval``: the default
    compaction interval of ``_spark_metadata``. ``merge_files_below``: a batch whose staged
    files total at most this many bytes is committed as one file (0: never merged)."""

    path: str
    compression: str
    retention_ms: int | None = None
    log_compact_interval: int = DEFAULT_COMPACT_INTERVAL
    merge_files_below: int = 0


def _check_known(opts: Mapping[str, str], spelled: Mapping[str, str]) -> None:
    """Refuse an unknown option, naming it and the known ones (``kafka.*`` passes through)."""
    for key in opts:
        if not SINK_OPTIONS.knows(key) and not is_format_option(key, sink=True):
            raise SinkConfigurationError(
                f"unknown option '{spelled[key]}' for the unaligned sink; known options: "
                + ", ".join(KNOWN_OPTION_NAMES)
            )


def _check_target_options(opts: Mapping[str, str], target: str) -> None:
    """Refuse an option that only another target (``Kafka``, ``file``, ``Iceberg``,
    ``Delta``) reads."""
    for key in opts:
        if target != "Kafka" and is_format_option(key, sink=True):
            raise SinkConfigurationError(
                f"option '{key}' (Schema Registry formats) applies to the Kafka sink only; this "
                f"query writes to the {target} sink"
            )
        if target not in ("Iceberg", "Delta") and is_table_option(key):
            raise SinkConfigurationError(
                f"option '{key}' applies to the Iceberg and Delta sinks only (with option "
                f"tableFormat); this query writes to the {target} sink"
            )
        if target in ("Iceberg", "Delta") and key.startswith(KAFKA_PREFIX):
            raise SinkConfigurationError(
                f"option 'kafka.{key[len(KAFKA_PREFIX) :]}' applies to the Kafka sink only; "
                f"this query writes to the {target} sink"
            )
        option = SINK_OPTIONS.find(key)
        if option is not None and option.targets and target not in option.targets:
            raise SinkConfigurationError(
                f"option '{option.name}' applies to the {', '.join(option.targets)} "
                f"sink{'s' if len(option.targets) > 1 else ''} only; this query writes to "
                f"the {target} sink"
            )


@dataclass(frozen=True)
class SinkOptions:
    checkpoint: Checkpoint
    query_name: str | None
    target: KafkaTarget | FileTarget | TableTarget
    chunk_rows: int
    min_batches_to_retain: int
    alignment: AlignmentSettings
    pending_on_rescale: PendingPolicy = PendingPolicy.REFUSE

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Check and parse the writer's options; raises :class:`SinkConfigurationError`."""
        opts = {k.lower(): v for k, v in options.items()}
        _check_known(opts, {k.lower(): k for k in options})
        checkpoint = opts.get(CHECKPOINT_LOCATION.key, "").strip()
        if not checkpoint:
            raise SinkConfigurationError(
                "format('unaligned') sink needs option 'checkpointLocation': its commit records "
                "live under it (set .option('checkpointLocation', ...) or "
                "spark.sql.streaming.checkpointLocation)"
            )
        target = _parse_target(opts)
        _check_target_options(opts, _target_name(target))
        chunk_rows = CHUNK_ROWS.value(opts)
        resolved = Checkpoint.resolve(checkpoint)
        return cls(
            checkpoint=resolved,
            query_name=opts.get(QUERY_NAME.key) or None,
            target=target,
            chunk_rows=chunk_rows,
            min_batches_to_retain=MIN_BATCHES_TO_RETAIN.value(opts),
            alignment=_parse_alignment(opts, resolved, chunk_rows),
            pending_on_rescale=PENDING_STATE_ON_RESCALE.value(opts),
        )


def _parse_alignment(
    opts: Mapping[str, str], checkpoint: Checkpoint, chunk_rows: int
) -> AlignmentSettings:
    state_dir = (
        opts.get(CHANNEL_STATE_PATH.key, "").strip() or checkpoint.default_channel_state_path()
    )
    return AlignmentSettings(
        mode=CHECKPOINT_MODE.value(opts),
        timeout_ms=ALIGNED_CHECKPOINT_TIMEOUT.value(opts),
        max_inflight_bytes=MAX_INFLIGHT_BYTES.value(opts),
        chunk_rows=chunk_rows,
        state_dir=absolute_path(state_dir),
        codec=CHANNEL_STATE_CODEC.value(opts),
        inline_threshold_bytes=CHANNEL_STATE_INLINE_THRESHOLD.value(opts),
        max_state_files=CHANNEL_STATE_MAX_FILES.value(opts),
        merge_below_bytes=CHANNEL_STATE_MERGE_BELOW.value(opts),
    )


def _target_name(target: KafkaTarget | FileTarget | TableTarget) -> str:
    if isinstance(target, TableTarget):
        return target.format.title
    return "file" if isinstance(target, FileTarget) else "Kafka"


def _parse_target(opts: Mapping[str, str]) -> KafkaTarget | FileTarget | TableTarget:
    fmt = table_format(opts)
    if fmt is not None:
        return parse_table_target(opts, fmt, COMPRESSION.value(opts))
    path = opts.get(PATH.key, "").strip()
    kafka = kafka_params(opts)
    kafka_named = [
        name
        for name, present in (
            (TOPIC.name, TOPIC.key in opts),
            ("kafka.bootstrap.servers", "bootstrap.servers" in kafka),
        )
        if present
    ]
    if path and kafka_named:
        raise SinkConfigurationError(
            f"format('unaligned') sink got both option 'path' ({path!r}, file sink) and "
            f"{' and '.join(kafka_named)} (Kafka sink); give one target"
        )
    if path:
        return FileTarget(
            path=absolute_path(path),
            compression=COMPRESSION.value(opts),
            retention_ms=RETENTION.value_or_none(opts),
            log_compact_interval=LOG_COMPACT_INTERVAL.value(opts),
            merge_files_below=MERGE_FILES_BELOW.value(opts),
        )
    if not kafka.get("bootstrap.servers", "").strip():
        raise SinkConfigurationError(
            "format('unaligned') sink needs a target: option 'path' (Parquet files) or "
            "'kafka.bootstrap.servers' with option 'topic' or a topic column (Kafka)"
        )
    return parse_kafka_target(opts, kafka)
