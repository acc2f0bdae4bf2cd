"""Spark's offset log, read by the sink: the batch start time and each source's end offset.

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

The query id is read by :meth:`unaligned.checkpoint.Checkpoint.query_id`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unaligned._util.fs import read_text
from unaligned.checkpoint import Checkpoint
from unaligned.errors import BarrierError

SUPPORTED_OFFSET_LOG_VERSIONS = (1, 2)
SERIALIZED_VOID_OFFSET = "-"


@dataclass(frozen=True)
class LoggedOffset:
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
    sources: tuple[LoggedOffset, ...]


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


def source_offsets(lines: Sequence[str], *, name: str = "<offsets>") -> tuple[LoggedOffset, ...]:
    """The per-source offsets of an offset log file given as its lines (version line first).

    v1: every line after the metadata line is one source, in source order. v2: every such
    line is ``<source id>:<offset>`` (source ids cannot contain ``:``).
    """
    if len(lines) < 2:
        raise BarrierError(f"offset log {name}: incomplete ({len(lines)} line(s))")
    version = _parse_version(lines[0], name)
    result: list[LoggedOffset] = []
    for index, line in enumerate(lines[2:]):
        if version == 1:
            result.append(LoggedOffset(str(index), _parse_offset_json(line, name, str(index))))
            continue
        source_id, sep, offset = line.partition(":")
        if not sep:
            raise BarrierError(f"offset log {name}: v2 line {line[:60]!r} is not '<id>:<offset>'")
        result.append(LoggedOffset(source_id, _parse_offset_json(offset, name, source_id)))
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


def read_offset_log(checkpoint: Checkpoint, batch_id: int) -> OffsetLogEntry:
    """Read and parse ``<checkpoint>/offsets/<batch_id>``."""
    location = checkpoint.offsets(batch_id)
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
