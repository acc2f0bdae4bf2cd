"""The file sink's names and manifest: per-query naming, entries, reading a manifest file.

Every name the file sink uses under its output ``path`` is built here: staging directories
(:func:`staging_dir`) and staged files (:func:`staged_name`, never ending in ``.parquet``),
committed data files (:func:`final_name`), manifest entries (:func:`manifest_name`) and
compacted manifest files (:func:`compacted_manifest_name`), each with the query id
(:func:`check_query_id`). It writes manifest entries (:func:`write_manifest_entry`) and reads
one manifest file (:func:`read_manifest_file`; listing all of them once per batch is
:mod:`unaligned.sink.files.committed_files`). Each entry also records the query's position in the
``_spark_metadata`` log and that log's compaction interval once fixed (where the next append
starts). Folding entries together (and ``retention``) is
:mod:`unaligned.sink.files.manifest_compaction`. The layout and the protocol: ARCHITECTURE.md,
"Checkpoint layout" (file sink).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql.types import StructType

from unaligned._util.fs import Location, atomic_write, read_bytes
from unaligned.errors import CommitLogError, SinkConfigurationError

STAGING_DIR = "_unaligned_staging"
STAGED_SUFFIX = ".staged"
"""Staged files end in ``.parquet.staged``: no ``*.parquet`` / ``**/*.parquet`` glob matches
them before their batch is committed and they are renamed."""
MANIFEST_DIR = "_unaligned_manifest"
MANIFEST_VERSION = 1
"""Version of a manifest entry and of a compacted manifest file."""
DEFAULT_MANIFEST_RETAIN = 100
"""Newest manifest entries of a query that compaction leaves as separate files."""
DEFAULT_COMPACT_EVERY = 100
"""Compaction runs once more than ``retain + compact_every`` entries of the query are live: at
most about ``retain + compact_every + 1`` manifest files per query, rewritten every
``compact_every`` batches."""

_QUERY_ID = re.compile(r"^[0-9A-Za-z_-]+$")
_ENTRY = re.compile(r"^(?P<query>[0-9A-Za-z_-]+)-(?P<batch>\d+)\.json$")
_COMPACTED = re.compile(r"^(?P<query>[0-9A-Za-z_-]+)-(?P<batch>\d+)\.compacted\.json$")


def check_query_id(query_id: str) -> str:
    """A query id usable in file names (Spark's are UUIDs); raises ``SinkConfigurationError``."""
    if not _QUERY_ID.match(query_id) or query_id.isdigit():
        raise SinkConfigurationError(
            f"query id {query_id!r} cannot name files: the file sink needs letters, digits, "
            "'-' or '_', not only digits"
        )
    return query_id


def final_name(batch_id: int, partition_id: int, query_id: str) -> str:
    """A committed data file's name."""
    return f"part-{query_id}-{batch_id:010d}-{partition_id:05d}.parquet"


def manifest_name(batch_id: int, query_id: str) -> str:
    """A batch's manifest entry name in ``MANIFEST_DIR``."""
    return f"{query_id}-{batch_id:010d}.json"


def compacted_manifest_name(query_id: str, through_batch_id: int) -> str:
    """A compacted manifest file: the query's batches up to ``through_batch_id``."""
    return f"{query_id}-{through_batch_id:010d}.compacted.json"


def staging_dir(batch_id: int, query_id: str) -> str:
    """A batch's staging directory relative to the output."""
    return f"{STAGING_DIR}/{query_id}/{batch_id}"


def staged_name(kind: str) -> str:
    """A staged file's name in its batch's staging directory, unique per writer: ``kind`` is
    ``<partition:05d>-<attempt>`` for a task's file, ``merged`` for the driver's merge."""
    return f"part-{kind}-{uuid.uuid4().hex[:12]}.parquet{STAGED_SUFFIX}"


@dataclass(frozen=True)
class ManifestName:
    """A parsed file name in ``MANIFEST_DIR``: an entry (one batch) or a compacted file (every
    batch up to ``batch_id``)."""

    name: str
    query_id: str
    batch_id: int
    compacted: bool

    @property
    def key(self) -> tuple[str, int]:
        return (self.query_id, self.batch_id)


def parse_manifest_name(name: str) -> ManifestName | None:
    """``None`` for what is not a manifest file (temporary files of atomic writes, strays)."""
    for pattern, compacted in ((_COMPACTED, True), (_ENTRY, False)):
        match = pattern.match(name)
        if match:
            return ManifestName(name, match.group("query"), int(match.group("batch")), compacted)
    return None


def list_manifest(output: Location) -> list[ManifestName]:
    """Every manifest file under ``output`` (missing directory: none), sorted by name."""
    directory = output.child(MANIFEST_DIR)
    selector = pafs.FileSelector(directory.path, allow_not_found=True, recursive=False)
    found = []
    for info in output.filesystem.get_file_info(selector):
        parsed = parse_manifest_name(info.base_name)
        if parsed is not None and info.type == pafs.FileType.File:
            found.append(parsed)
    return sorted(found, key=lambda m: m.name)


def write_manifest_entry(
    output: Location,
    batch_id: int,
    query_id: str,
    schema_json: str,
    items: Sequence[Mapping[str, Any]],
    *,
    decided_at_ms: int,
    spark_log: int,
    spark_log_interval: int | None,
) -> None:
    """Write batch ``batch_id``'s manifest entry atomically: the committed files of ``items``
    (the commit record's prepared items) under the query's name. ``decided_at_ms`` (the commit
    record's) is what ``retention`` counts from; ``spark_log`` is the query's position in the
    ``_spark_metadata`` log after this batch (-1: none yet), ``spark_log_interval`` the log's
    compaction interval once fixed (``None``: not known)."""
    entry: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "batchId": batch_id,
        "committedAtMs": int(time.time() * 1000),
        "decidedAtMs": decided_at_ms,
        "sparkLog": spark_log,
        "sparkLogInterval": spark_log_interval,
        "schema": json.loads(schema_json),
        "files": [
            {"path": item["final"], "rows": item["rows"], "bytes": item["bytes"]}
            for item in sorted(items, key=lambda i: i["final"])
        ],
        "queryId": query_id,
    }
    location = output.child(MANIFEST_DIR, manifest_name(batch_id, query_id))
    atomic_write(location, json.dumps(entry, sort_keys=True).encode("utf-8"))


# --- reading one manifest file ------------------------------------------------------------------


@dataclass(frozen=True)
class CommittedFile:
    """One committed Parquet file: its path relative to the output path and its row count."""

    batch_id: int
    path: str
    rows: int
    bytes: int = 0
    query_id: str | None = None


@dataclass(frozen=True)
class ManifestEntry:
    """One committed batch of one query."""

    batch_id: int
    schema: StructType
    files: tuple[CommittedFile, ...]
    query_id: str
    committed_at_ms: int = 0
    decided_at_ms: int | None = None
    spark_log: int | None = None
    """The query's position in the ``_spark_metadata`` log after this batch (``None``: written
    by an earlier version)."""
    spark_log_interval: int | None = None
    """That log's compaction interval once two compaction files fixed it (``None``: not known
    then, or written by an earlier version)."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.query_id, self.batch_id)

    @property
    def expiry_base_ms(self) -> int:
        """What ``retention`` counts from: the decision (the commit, for earlier versions)."""
        return self.decided_at_ms if self.decided_at_ms is not None else self.committed_at_ms


def read_manifest_file(output: Location, name: ManifestName) -> list[ManifestEntry]:
    """The batches one manifest file holds: one for an entry, many for a compacted file.

    Raises ``FileNotFoundError`` if the file is gone (a compaction deleted it after the
    listing) and :class:`CommitLogError` if it is unreadable or does not match its name.
    """
    location = output.child(MANIFEST_DIR, name.name)
    described = location.uri or location.path
    data = read_bytes(location)
    if data is None:
        raise FileNotFoundError(described)
    try:
        doc = json.loads(data.decode("utf-8"))
        if doc["version"] != MANIFEST_VERSION:
            raise CommitLogError(
                f"manifest file {described} has unsupported version {doc['version']}"
            )
        if doc.get("queryId") != name.query_id or bool(doc.get("compacted")) != name.compacted:
            raise CommitLogError(
                f"manifest file {described} holds query {doc.get('queryId')!r} "
                f"({'compacted' if doc.get('compacted') else 'entry'}), not what its name says"
            )
        query_id = name.query_id
        if name.compacted:
            return _compacted_entries(doc, query_id, described)
        schema = StructType.fromJson(doc["schema"])
        batch_id = int(doc["batchId"])
        if batch_id != name.batch_id:
            raise CommitLogError(f"manifest entry {described} names batch {batch_id}")
        return [
            ManifestEntry(
                batch_id=batch_id,
                schema=schema,
                files=tuple(_committed_file(f, batch_id, query_id) for f in doc["files"]),
                query_id=query_id,
                committed_at_ms=int(doc.get("committedAtMs", 0)),
                decided_at_ms=_optional_int(doc.get("decidedAtMs")),
                spark_log=_optional_int(doc.get("sparkLog")),
                spark_log_interval=_optional_int(doc.get("sparkLogInterval")),
            )
        ]
    except CommitLogError:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise CommitLogError(f"manifest file {described} is unreadable: {exc!r}") from exc


def _committed_file(doc: Mapping[str, Any], batch_id: int, query_id: str) -> CommittedFile:
    return CommittedFile(
        batch_id, str(doc["path"]), int(doc["rows"]), int(doc.get("bytes", 0)), query_id
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _compacted_entries(
    doc: Mapping[str, Any], query_id: str, described: str
) -> list[ManifestEntry]:
    if not doc["batches"]:
        return []  # every batch it held expired; it keeps the marks
    schema = StructType.fromJson(doc["schema"])
    files: dict[int, list[CommittedFile]] = {}
    for f in doc["files"]:
        batch_id = int(f["batchId"])
        files.setdefault(batch_id, []).append(_committed_file(f, batch_id, query_id))
    entries = [
        ManifestEntry(
            batch_id=int(b["batchId"]),
            schema=schema,
            files=tuple(files.pop(int(b["batchId"]), ())),
            query_id=query_id,
            committed_at_ms=int(b.get("committedAtMs", 0)),
            decided_at_ms=_optional_int(b.get("decidedAtMs")),
        )
        for b in doc["batches"]
    ]
    if files:
        raise CommitLogError(
            f"compacted manifest {described} names files of batches {sorted(files)} it does "
            "not list"
        )
    return entries
