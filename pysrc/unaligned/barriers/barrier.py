"""Barriers: a Spark micro-batch seen as a Flink checkpoint barrier, and the deadline it sets.

In unaligned mode the barrier of batch ``N`` is the batch itself: its id is Spark's batch id and
its start time is ``batchTimestampMs``, which the driver fixes once and writes to Spark's offset
log ``<checkpoint>/offsets/<N>`` *before* any task of the batch runs. Every task of the batch
(and every retry of a task, and a re-run of the batch after a restart) therefore reads the same
start time, so an ``alignedCheckpointTimeout`` is measured from the batch start, not from when
a task happened to start (Flink's FLINK-23041: a timeout counted per task lets a late task
spend the whole timeout again).

Offset log format written by Spark 4.3 (``OffsetSeqLog``; checked against files written by
pyspark 4.3.0, samples in ``tests/fixtures/spark_checkpoints``)::

    v1                      <- version line, "v<int>"
    {"batchWatermarkMs":0,"batchTimestampMs":1795372420083,"conf":{...}}
    8                       <- one line per source, in source order: its end offset JSON,
    {"offset":9,...}           or "-" when the source has no offset

    v2                      <- spark.sql.streaming.offsetLog.formatVersion=2
    {"batchWatermarkMs":0,"batchTimestampMs":...,"conf":{...},"sourceMetadataInfo":{}}
    rates:10                <- "<source id>:<offset JSON or ->" per line; the id is the
    micro_rates:{...}          ordinal ("0") or the name given with readStream.name(...)

The query id (stable across restarts; the same as the task local property
``sql.streaming.queryId``) is in ``<checkpoint>/metadata`` as ``{"id": "..."}``.

Restart note (checked with pyspark 4.3.0): after a restart Spark re-runs the last uncommitted
batch from its existing offset log entry, so that batch keeps the ``batchTimestampMs`` of the
run that planned it (a checkpoint left for 20 minutes re-ran its batch with a start time 20
minutes old). Measured from that start, the deadline of a re-run batch has passed before any
task starts; :meth:`Barrier.deadline` takes ``not_before_ms`` (e.g. when this run started) to
measure a re-run batch from no earlier than that.

Clock note: the deadline compares an executor's wall clock with a start time taken from the
driver's wall clock; skew between hosts shifts every task's cut by the same amount.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pyarrow.fs as pafs

from unaligned.errors import BarrierError, OptionError

logger = logging.getLogger(__name__)

OFFSETS_DIR = "offsets"
QUERY_METADATA_FILE = "metadata"
SUPPORTED_OFFSET_LOG_VERSIONS = (1, 2)
SERIALIZED_VOID_OFFSET = "-"

#: A clock returning wall-clock time in epoch milliseconds.
Clock = Callable[[], float]


def wall_clock_ms() -> float:
    """Wall-clock time in epoch milliseconds (the unit of ``batchTimestampMs``)."""
    return time.time() * 1000.0


# --- locations ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """A path in a ``pyarrow.fs`` filesystem.

    ``uri`` rebuilds the same place with ``FileSystem.from_uri`` in another process; it is
    ``None`` when the filesystem was handed in by the caller (then every reader must be handed
    the same filesystem).
    """

    filesystem: pafs.FileSystem
    path: str
    uri: str | None

    def child(self, *parts: str) -> "Location":
        """The location ``parts`` below this one (``/``-separated, as in every pyarrow fs)."""
        suffix = "/".join(parts)
        path = f"{self.path.rstrip('/')}/{suffix}"
        if self.uri is None:
            return Location(self.filesystem, path, None)
        base, sep, query = self.uri.partition("?")
        return Location(self.filesystem, path, f"{base.rstrip('/')}/{suffix}{sep}{query}")


def resolve_location(location: str, filesystem: pafs.FileSystem | None = None) -> Location:
    """Resolve a checkpoint or state location.

    With ``filesystem`` given, ``location`` is a path inside it. Otherwise ``location`` is a
    URI (``file:/x`` and ``file:///x`` as Spark and Hadoop write them, ``s3://``, ...; Hadoop's
    ``s3a://``/``s3n://`` map to pyarrow's ``s3://``) or a local path (relative paths are made
    absolute against the current directory, as Spark does for a checkpoint location).
    """
    if filesystem is not None:
        return Location(filesystem, location, None)
    uri = location
    scheme, sep, rest = location.partition("://")
    if sep and scheme in ("s3a", "s3n"):
        uri = f"s3://{rest}"
    elif not sep and not location.startswith("file:"):
        uri = os.path.abspath(location)
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise OptionError(f"cannot resolve location {location!r} to a filesystem: {exc}") from exc
    return Location(fs, path, uri)


def read_text(location: Location) -> str:
    """The whole (small) file at ``location`` as UTF-8; ``FileNotFoundError`` if absent."""
    with location.filesystem.open_input_stream(location.path) as stream:
        return stream.read().decode("utf-8")


# --- Spark's offset log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOffset:
    """One source's line of an offset log entry.

    ``source_id`` is the ordinal (``"0"``, ``"1"``, ...) in a v1 file, and the id written by
    Spark in a v2 file (the ordinal or the name given with ``readStream.name``). ``offset`` is
    the parsed end-offset JSON (exclusive end of the batch for that source), or ``None`` when
    Spark wrote ``-`` (no offset for this source).
    """

    source_id: str
    offset: Any | None


@dataclass(frozen=True)
class OffsetLogEntry:
    """A parsed ``<checkpoint>/offsets/<batchId>`` file."""

    version: int
    batch_watermark_ms: int
    batch_timestamp_ms: int
    conf: Mapping[str, str]
    sources: tuple[SourceOffset, ...]


def _split_lines(text: str) -> list[str]:
    # Spark reads the file with getLines (splits on \n, drops a trailing \r); splitlines()
    # would also split on characters that may appear inside JSON strings.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _parse_version(line: str, name: str) -> int:
    if not line.startswith("v") or not line[1:].isdigit():
        raise BarrierError(f"offset log {name}: first line {line[:40]!r} is not a version 'v<n>'")
    version = int(line[1:])
    if version not in SUPPORTED_OFFSET_LOG_VERSIONS:
        raise BarrierError(
            f"offset log {name}: version v{version} is not supported "
            f"(supported: {', '.join(f'v{v}' for v in SUPPORTED_OFFSET_LOG_VERSIONS)})"
        )
    return version


def _parse_offset_json(text: str, name: str, source_id: str) -> Any | None:
    if text == SERIALIZED_VOID_OFFSET:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BarrierError(
            f"offset log {name}: offset of source {source_id!r} is not JSON: {exc}"
        ) from exc


def source_offsets(lines: Sequence[str], *, name: str = "<offsets>") -> tuple[SourceOffset, ...]:
    """The per-source offsets of an offset log file given as its lines (version line first).

    v1: every line after the metadata line is one source, in source order. v2: every such
    line is ``<source id>:<offset>`` (source ids cannot contain ``:``).
    """
    if len(lines) < 2:
        raise BarrierError(f"offset log {name}: incomplete ({len(lines)} line(s))")
    version = _parse_version(lines[0], name)
    result: list[SourceOffset] = []
    for index, line in enumerate(lines[2:]):
        if version == 1:
            result.append(SourceOffset(str(index), _parse_offset_json(line, name, str(index))))
            continue
        source_id, sep, offset = line.partition(":")
        if not sep:
            raise BarrierError(f"offset log {name}: v2 line {line[:60]!r} is not '<id>:<offset>'")
        result.append(SourceOffset(source_id, _parse_offset_json(offset, name, source_id)))
    return tuple(result)


def parse_offset_log(text: str, *, name: str = "<offsets>") -> OffsetLogEntry:
    """Parse the text of one offset log file; ``name`` is used in error messages."""
    lines = _split_lines(text)
    sources = source_offsets(lines, name=name)
    version = _parse_version(lines[0], name)
    if not lines[1].strip():
        raise BarrierError(f"offset log {name}: no batch metadata line (batchTimestampMs)")
    try:
        metadata = json.loads(lines[1])
    except json.JSONDecodeError as exc:
        raise BarrierError(f"offset log {name}: metadata line is not JSON: {exc}") from exc
    if not isinstance(metadata, dict) or not isinstance(metadata.get("batchTimestampMs"), int):
        raise BarrierError(f"offset log {name}: metadata has no integer batchTimestampMs")
    watermark = metadata.get("batchWatermarkMs", 0)
    conf = metadata.get("conf", {})
    if not isinstance(watermark, int) or not isinstance(conf, dict):
        raise BarrierError(f"offset log {name}: malformed batchWatermarkMs or conf")
    return OffsetLogEntry(
        version=version,
        batch_watermark_ms=watermark,
        batch_timestamp_ms=metadata["batchTimestampMs"],
        conf={str(k): str(v) for k, v in conf.items()},
        sources=sources,
    )


def read_offset_log(
    checkpoint_location: str, batch_id: int, filesystem: pafs.FileSystem | None = None
) -> OffsetLogEntry:
    """Read and parse ``<checkpoint>/offsets/<batch_id>``."""
    location = resolve_location(checkpoint_location, filesystem).child(OFFSETS_DIR, str(batch_id))
    name = location.uri or location.path
    try:
        text = read_text(location)
    except FileNotFoundError as exc:
        raise BarrierError(
            f"offset log {name} for batch {batch_id} does not exist "
            "(Spark writes it before the batch runs; wrong checkpoint location?)"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BarrierError(f"offset log {name} for batch {batch_id} is unreadable: {exc}") from exc
    return parse_offset_log(text, name=name)


def read_query_id(checkpoint_location: str, filesystem: pafs.FileSystem | None = None) -> str:
    """The query id from ``<checkpoint>/metadata`` (``{"id": "..."}``)."""
    location = resolve_location(checkpoint_location, filesystem).child(QUERY_METADATA_FILE)
    name = location.uri or location.path
    try:
        text = read_text(location)
    except FileNotFoundError as exc:
        raise BarrierError(f"query metadata {name} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BarrierError(f"query metadata {name} is unreadable: {exc}") from exc
    try:
        query_id = json.loads(_split_lines(text)[0])["id"]
    except (IndexError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise BarrierError(f"query metadata {name} has no JSON 'id'") from exc
    if not isinstance(query_id, str) or not query_id:
        raise BarrierError(f"query metadata {name}: 'id' is not a non-empty string")
    return query_id


# --- barrier and deadline -------------------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """``start_ms + timeout_ms`` on a wall clock (epoch milliseconds).

    Measured from the batch start fixed on the driver, never from the task start.
    """

    start_ms: int
    timeout_ms: int
    clock: Clock = field(default=wall_clock_ms, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.timeout_ms < 0:
            raise OptionError(f"alignedCheckpointTimeout must be >= 0 ms, got {self.timeout_ms}")

    @property
    def deadline_ms(self) -> int:
        return self.start_ms + self.timeout_ms

    def elapsed_ms(self) -> float:
        """Milliseconds since the start (negative if this clock is behind the driver's)."""
        return self.clock() - self.start_ms

    def expired(self) -> bool:
        """True from the deadline on (``now >= start_ms + timeout_ms``)."""
        return self.clock() >= self.deadline_ms

    def remaining_s(self) -> float:
        """Seconds left until the deadline, never negative."""
        return max(0.0, (self.deadline_ms - self.clock()) / 1000.0)


@dataclass(frozen=True)
class Barrier:
    """The barrier of one micro-batch: ``batch_id`` (the barrier id), its driver-fixed start
    time ``start_ms`` (``batchTimestampMs``) and the query id."""

    batch_id: int
    start_ms: int
    query_id: str

    def deadline(
        self, timeout_ms: int, clock: Clock = wall_clock_ms, *, not_before_ms: int | None = None
    ) -> Deadline:
        """The aligned-checkpoint deadline of this batch: ``start + timeout_ms``, where start is
        ``start_ms``, or ``not_before_ms`` if later (a batch re-run after a restart keeps the
        start time of the run that planned it)."""
        start = self.start_ms if not_before_ms is None else max(self.start_ms, not_before_ms)
        return Deadline(start, timeout_ms, clock)


def read_barrier(
    checkpoint_location: str, batch_id: int, filesystem: pafs.FileSystem | None = None
) -> Barrier:
    """The barrier of ``batch_id``, from Spark's offset log and the query metadata."""
    entry = read_offset_log(checkpoint_location, batch_id, filesystem)
    query_id = read_query_id(checkpoint_location, filesystem)
    barrier = Barrier(batch_id=batch_id, start_ms=entry.batch_timestamp_ms, query_id=query_id)
    logger.debug("read barrier %s", barrier)
    return barrier
