"""Options of ``df.writeStream.format("unaligned")``, parsed and checked before any data moves.

Spark hands the stream writer the user's options with lower-cased keys, plus
``checkpointlocation`` (resolved once into a :class:`~unaligned.checkpoint.Checkpoint`) and
``queryname``. Exactly one target is chosen: Kafka (``kafka.bootstrap.servers`` and a ``topic``
option or column; other ``kafka.*`` options pass to the producer, those that would break
exactly-once are refused; ``deliveryGuarantee`` ``exactly-once``, transactions, or
``at-least-once``, an idempotent producer without them) or files (``path``). An unknown option,
or one only the other target reads, is refused naming it; sizes and durations go through
:mod:`unaligned._parsing`, the Kafka target's own checks are :mod:`unaligned.sink.kafka_target`.
What each option means: README.md, "Sink options" (the known ones are ``_OPTIONS``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from unaligned._fs import absolute_path
from unaligned._parsing import (
    KAFKA_PREFIX,
    kafka_params,
    parse_bytes,
    parse_choice,
    parse_duration_ms,
    parse_positive,
)
from unaligned.barriers.alignment import AlignmentSettings, CheckpointMode
from unaligned.channel_state.codecs import check_codec
from unaligned.checkpoint import Checkpoint
from unaligned.errors import SinkConfigurationError
from unaligned.registry.options import SINK_OPTION_NAMES, is_format_option
from unaligned.sink.kafka_target import (
    KafkaTarget,
    parse_kafka_target,
)

DEFAULT_CHUNK_ROWS = 1000
DEFAULT_MIN_BATCHES_TO_RETAIN = 100
DEFAULT_COMPACT_INTERVAL = 10
"""Spark's ``spark.sql.streaming.fileSink.log.compactInterval`` default."""
DEFAULT_COMPRESSION = "snappy"
PARQUET_COMPRESSIONS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
DEFAULT_ALIGNED_CHECKPOINT_TIMEOUT = "30s"
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 1024 * 1024
DEFAULT_CHANNEL_STATE_CODEC = "deflate"
DEFAULT_INLINE_THRESHOLD_BYTES = 20 * 1024
DEFAULT_MAX_STATE_FILES = 8
DEFAULT_MERGE_BELOW_BYTES = 16 * 1024 * 1024


class PendingPolicy(enum.Enum):
    """``pendingStateOnRescale``: channel state pending for another sink task layout
    (:mod:`unaligned.sink.pending_layout`)."""

    REFUSE = "refuse"
    """The batch is not decided, naming the pending state and the way out (default)."""
    REASSIGN = "reassign"
    """State of a vanished task index moves to task ``index mod n``: order may break."""


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


@dataclass(frozen=True)
class _Option:
    """One known sink option: its spelling in messages and the target it applies to."""

    name: str
    only_for: str | None = None  # "Kafka" or "file": refused with the other target


_OPTIONS: dict[str, _Option] = {
    o.name.lower(): o
    for o in (
        _Option("checkpointLocation"),
        _Option("queryName"),  # Spark passes it to every sink
        _Option("path", "file"),
        _Option("compression", "file"),
        _Option("retention", "file"),
        _Option("logCompactInterval", "file"),
        _Option("mergeFilesBelow", "file"),
        _Option("topic", "Kafka"),
        _Option("transactionalIdPrefix", "Kafka"),
        _Option("maxUnacknowledgedBytes", "Kafka"),
        _Option("deliveryGuarantee", "Kafka"),
        _Option("chunkRows"),
        _Option("minBatchesToRetain"),
        _Option("checkpointMode"),
        _Option("alignedCheckpointTimeout"),
        _Option("maxInflightBytes"),
        _Option("channelStateCodec"),
        _Option("channelStateInlineThreshold"),
        _Option("channelStatePath"),
        _Option("channelStateMaxFiles"),
        _Option("channelStateMergeBelow"),
        _Option("pendingStateOnRescale"),
    )
}
#: Every option the sink knows, as listed in the message for an unknown one.
KNOWN_OPTION_NAMES: tuple[str, ...] = tuple(
    sorted([*(o.name for o in _OPTIONS.values()), *SINK_OPTION_NAMES, "kafka.*"], key=str.lower)
)


def _check_known(opts: Mapping[str, str], spelled: Mapping[str, str]) -> None:
    """Refuse an unknown option, naming it and the known ones (``kafka.*`` passes through)."""
    for key in opts:
        if (
            not key.startswith(KAFKA_PREFIX)
            and key not in _OPTIONS
            and not is_format_option(key, sink=True)
        ):
            raise SinkConfigurationError(
                f"unknown option '{spelled[key]}' for the unaligned sink; known options: "
                + ", ".join(KNOWN_OPTION_NAMES)
            )


def _check_target_options(opts: Mapping[str, str], target: str) -> None:
    """Refuse an option that only the other target (``Kafka`` or ``file``) reads."""
    for key in opts:
        if target == "file" and is_format_option(key, sink=True):
            raise SinkConfigurationError(
                f"option '{key}' (Schema Registry formats) applies to the Kafka sink only; this "
                "query writes to the file sink"
            )
        option = _OPTIONS.get(key)
        if option is not None and option.only_for not in (None, target):
            raise SinkConfigurationError(
                f"option '{option.name}' applies to the {option.only_for} sink only; this "
                f"query writes to the {target} sink"
            )


@dataclass(frozen=True)
class SinkOptions:
    checkpoint: Checkpoint
    query_name: str | None
    target: KafkaTarget | FileTarget
    chunk_rows: int
    min_batches_to_retain: int
    alignment: AlignmentSettings
    pending_on_rescale: PendingPolicy = PendingPolicy.REFUSE

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Check and parse the writer's options; raises :class:`SinkConfigurationError`."""
        opts = {k.lower(): v for k, v in options.items()}
        _check_known(opts, {k.lower(): k for k in options})
        checkpoint = opts.get("checkpointlocation", "").strip()
        if not checkpoint:
            raise SinkConfigurationError(
                "format('unaligned') sink needs option 'checkpointLocation': its commit records "
                "live under it (set .option('checkpointLocation', ...) or "
                "spark.sql.streaming.checkpointLocation)"
            )
        target = _parse_target(opts)
        _check_target_options(opts, "file" if isinstance(target, FileTarget) else "Kafka")
        chunk_rows = _positive_int(opts, "chunkrows", "chunkRows", DEFAULT_CHUNK_ROWS)
        resolved = Checkpoint.resolve(checkpoint)
        return cls(
            checkpoint=resolved,
            query_name=opts.get("queryname") or None,
            target=target,
            chunk_rows=chunk_rows,
            min_batches_to_retain=_positive_int(
                opts, "minbatchestoretain", "minBatchesToRetain", DEFAULT_MIN_BATCHES_TO_RETAIN
            ),
            alignment=_parse_alignment(opts, resolved, chunk_rows),
            pending_on_rescale=PendingPolicy(
                parse_choice(
                    "pendingStateOnRescale",
                    opts.get("pendingstateonrescale", PendingPolicy.REFUSE.value),
                    [p.value for p in PendingPolicy],
                )
            ),
        )


def _parse_alignment(
    opts: Mapping[str, str], checkpoint: Checkpoint, chunk_rows: int
) -> AlignmentSettings:
    mode = CheckpointMode(
        parse_choice(
            "checkpointMode",
            opts.get("checkpointmode", CheckpointMode.UNALIGNED.value),
            [m.value for m in CheckpointMode],
        )
    )
    codec = opts.get("channelstatecodec", DEFAULT_CHANNEL_STATE_CODEC).strip().lower()
    check_codec(codec)
    state_dir = opts.get("channelstatepath", "").strip() or checkpoint.default_channel_state_path()
    return AlignmentSettings(
        mode=mode,
        timeout_ms=parse_duration_ms(
            "alignedCheckpointTimeout",
            opts.get("alignedcheckpointtimeout", DEFAULT_ALIGNED_CHECKPOINT_TIMEOUT),
        ),
        max_inflight_bytes=_bytes(
            opts, "maxinflightbytes", "maxInflightBytes", DEFAULT_MAX_INFLIGHT_BYTES
        ),
        chunk_rows=chunk_rows,
        state_dir=absolute_path(state_dir),
        codec=codec,
        inline_threshold_bytes=_bytes(
            opts,
            "channelstateinlinethreshold",
            "channelStateInlineThreshold",
            DEFAULT_INLINE_THRESHOLD_BYTES,
        ),
        max_state_files=_positive_int(
            opts, "channelstatemaxfiles", "channelStateMaxFiles", DEFAULT_MAX_STATE_FILES
        ),
        merge_below_bytes=_bytes(
            opts, "channelstatemergebelow", "channelStateMergeBelow", DEFAULT_MERGE_BELOW_BYTES
        ),
    )


def _bytes(opts: Mapping[str, str], key: str, name: str, default: int, minimum: int = 0) -> int:
    raw = opts.get(key)
    return default if raw is None else parse_bytes(name, raw, minimum)


def _parse_target(opts: Mapping[str, str]) -> KafkaTarget | FileTarget:
    path = opts.get("path", "").strip()
    kafka = kafka_params(opts)
    kafka_named = [
        name
        for name, present in (
            ("topic", "topic" in opts),
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
        compression = parse_choice(
            "compression", opts.get("compression", DEFAULT_COMPRESSION), PARQUET_COMPRESSIONS
        )
        retention = opts.get("retention")
        return FileTarget(
            path=absolute_path(path),
            compression=compression,
            retention_ms=None
            if retention is None
            else parse_duration_ms("retention", retention, minimum=1),
            log_compact_interval=_positive_int(
                opts, "logcompactinterval", "logCompactInterval", DEFAULT_COMPACT_INTERVAL
            ),
            merge_files_below=_bytes(opts, "mergefilesbelow", "mergeFilesBelow", 0),
        )
    if not kafka.get("bootstrap.servers", "").strip():
        raise SinkConfigurationError(
            "format('unaligned') sink needs a target: option 'path' (Parquet files) or "
            "'kafka.bootstrap.servers' with option 'topic' or a topic column (Kafka)"
        )
    return parse_kafka_target(opts, kafka)


def _positive_int(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    raw = opts.get(key)
    return default if raw is None else parse_positive(name, raw)
