"""Spark's layout of a file sink's ``_spark_metadata`` log: names, intervals and lines.

What :mod:`unaligned.sink.files.spark_metadata_log` writes must be what Spark's readers
(``FileStreamSinkLog`` / ``CompactibleFileStreamLog``) read: a directory of log files named by
id, ``<id>.compact`` when ``(id + 1) % interval == 0`` (:func:`log_file_name`), the interval
fixed by the compaction files present (:func:`compact_interval`, Spark's
``deriveCompactInterval``), each file the line ``v1`` then one JSON line per data file
(:func:`entry_line`, its ``path`` a URI as Spark qualifies the output: :func:`spark_uri`). A
batch's lines are found again by its files' names (:func:`batch_marker`). :class:`LogPosition`
is where a query's newest batch is in the log, as the file sink's manifest keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

SPARK_METADATA_DIR = "_spark_metadata"
VERSION_LINE = b"v1"
COMPACT_SUFFIX = ".compact"
BLOCK_SIZE = 32 * 1024 * 1024
"""What Hadoop's local filesystem reports as a file's block size (Spark's own sink copies it)."""
_JAVA_URI_PATH_SAFE = "/!*'(),;:$&+=@"
"""Characters ``java.net.URI`` keeps as they are in a path (beside letters, digits, ``-_.~``)."""


@dataclass(frozen=True)
class LogFile:
    log_id: int
    name: str
    compact: bool
    mtime_ms: int


@dataclass(frozen=True)
class LogPosition:
    """Where a query's newest batch is in the log (``log_id``; -1: nowhere yet), and the log's
    compaction interval once two compaction files fixed it (``None``: not known). The file
    sink keeps both in each manifest entry; the next append starts from them."""

    log_id: int
    interval: int | None = None


def spark_uri(output_path: str) -> str:
    """The output path as Spark qualifies it (``file:/abs/path``, ``s3a://bucket/t``): the
    prefix of every ``path`` in the log. Spark's readers must name the output alike."""
    if output_path.startswith("file:"):
        return "file:/" + output_path[len("file:") :].lstrip("/")
    if "://" in output_path:
        return output_path.rstrip("/")
    return "file:" + quote(output_path.rstrip("/") or "/", safe=_JAVA_URI_PATH_SAFE)


def is_compaction(log_id: int, interval: int) -> bool:
    return (log_id + 1) % interval == 0


def log_file_name(log_id: int, interval: int) -> str:
    """The name Spark's readers look for: ``<id>.compact`` for a compaction id, else ``<id>``."""
    return f"{log_id}{COMPACT_SUFFIX}" if is_compaction(log_id, interval) else str(log_id)


def derive_compact_interval(default: int, latest_compact_id: int) -> int:
    """Spark's ``CompactibleFileStreamLog.deriveCompactInterval``: an interval compatible with
    the only compaction file, ``latest_compact_id``."""
    size = latest_compact_id + 1
    if size <= default:
        return size
    if default < size // 2:
        return next((i for i in range(default, size // 2 + 1) if size % i == 0), size)
    return size


def fixed_interval(files: Iterable[LogFile]) -> int | None:
    """The interval two compaction files or more fix (the gap between the newest two), which no
    writer changes after; ``None`` with fewer."""
    compacts = sorted((f.log_id for f in files if f.compact), reverse=True)
    return compacts[0] - compacts[1] if len(compacts) >= 2 else None


def compact_interval(files: Sequence[LogFile], default: int) -> int:
    """The interval Spark's readers use for this log: two compaction files or more fix it, one
    constrains it, none leaves the default."""
    fixed = fixed_interval(files)
    if fixed is not None:
        return fixed
    compacts = [f.log_id for f in files if f.compact]
    if compacts:
        return derive_compact_interval(default, max(compacts))
    return default


def entry_line(uri: str, size: int, modification_ms: int) -> bytes:
    """One file's JSON line, fields in ``SinkFileStatus`` order."""
    doc = {
        "path": uri,
        "size": size,
        "isDir": False,
        "modificationTime": modification_ms,
        "blockReplication": 1,
        "blockSize": BLOCK_SIZE,
        "action": "add",
    }
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def batch_marker(query_id: str, batch_id: int) -> bytes:
    """What every line of query ``query_id``'s batch ``batch_id`` contains (its files' names)."""
    return f"/part-{query_id}-{batch_id:010d}-".encode()
