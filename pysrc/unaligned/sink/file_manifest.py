"""The file sink's names and manifest: per-query naming, entries, compaction, reading a file.

Every name the file sink uses under its output ``path`` is built here: staging directories
(:func:`staging_dir`), committed data files (:func:`final_name`), manifest entries
(:func:`manifest_name`) and compacted manifest files (:func:`compacted_manifest_name`), each
with the query id (:func:`check_query_id`). It writes manifest entries
(:func:`write_manifest_entry`), compacts a query's finished entries older than its newest
``manifest_retain`` into one file written *before* the folded ones are deleted
(:func:`compact_manifest`), and reads one manifest file (:func:`read_manifest_file`; listing
all of them once per batch is :mod:`unaligned.sink.committed_files`). The layout and the
protocol: ARCHITECTURE.md, "Checkpoint layout" (file sink).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql.types import StructType

from unaligned._fs import Location, atomic_write, read_bytes
from unaligned.errors import CommitLogError, SinkConfigurationError

logger = logging.getLogger(__name__)

STAGING_DIR = "_unaligned_staging"
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
) -> None:
    """Write batch ``batch_id``'s manifest entry atomically: the committed files of ``items``
    (the commit record's prepared items) under the query's name."""
    entry: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "batchId": batch_id,
        "committedAtMs": int(time.time() * 1000),
        "schema": json.loads(schema_json),
        "files": [
            {"path": item["final"], "rows": item["rows"], "bytes": item["bytes"]}
            for item in sorted(items, key=lambda i: i["final"])
        ],
        "queryId": query_id,
    }
    location = output.child(MANIFEST_DIR, manifest_name(batch_id, query_id))
    atomic_write(location, json.dumps(entry, sort_keys=True).encode("utf-8"))


def compact_manifest(
    output: Location,
    query_id: str,
    *,
    retain: int,
    compact_every: int,
    unfinished: Collection[int],
    up_to_batch: int | None,
) -> int:
    """Fold the query's finished entries (not in ``unfinished``, at most ``up_to_batch``) older
    than its newest ``retain`` into one compacted file, once more than ``retain +
    compact_every`` are live.

    Runs in the query's driver only (commit, abort, recovery: one at a time). Order: write
    the new compacted file (every batch of the older compacted files and the folded
    entries), then delete the older compacted files, then the folded entries; each file is
    deleted only by a compaction that read it and wrote its batches first. A compaction that
    finds a listed file gone (another one ran at the same time) deletes nothing. Returns how
    many entries were folded.
    """
    names = [m for m in list_manifest(output) if m.query_id == query_id]
    entries = sorted((m for m in names if not m.compacted), key=lambda m: m.batch_id)
    if len(entries) <= retain + compact_every:
        return 0
    fold = [
        m
        for m in entries[:-retain]
        if m.batch_id not in unfinished and (up_to_batch is None or m.batch_id <= up_to_batch)
    ]
    if not fold:
        return 0
    compacted = [m for m in names if m.compacted]
    batches: dict[int, ManifestEntry] = {}
    try:
        for name in (*compacted, *fold):
            for entry in read_manifest_file(output, name):
                batches[entry.batch_id] = entry
    except FileNotFoundError as exc:
        # Another compaction of this query ran meanwhile (a commit process of an earlier
        # run still going): it has folded what this one listed. Delete nothing.
        logger.warning("manifest of query %s changed while compacting (%s)", query_id, exc)
        return 0
    through = max(batches)
    target = compacted_manifest_name(query_id, through)
    atomic_write(
        output.child(MANIFEST_DIR, target),
        json.dumps(_compacted_doc(query_id, batches), sort_keys=True).encode("utf-8"),
    )
    fs = output.filesystem
    for name in (*compacted, *fold):
        if name.name != target:
            try:
                fs.delete_file(output.child(MANIFEST_DIR, name.name).path)
            except FileNotFoundError:
                pass
    logger.info(
        "manifest of query %s: folded %d entries into %s (%d batches)",
        query_id,
        len(fold),
        target,
        len(batches),
    )
    return len(fold)


def _compacted_doc(query_id: str, batches: Mapping[int, ManifestEntry]) -> dict[str, Any]:
    ordered = [batches[b] for b in sorted(batches)]
    return {
        "version": MANIFEST_VERSION,
        "compacted": True,
        "queryId": query_id,
        "throughBatchId": ordered[-1].batch_id,
        "schema": json.loads(ordered[-1].schema.json()),
        "batches": [{"batchId": e.batch_id, "committedAtMs": e.committed_at_ms} for e in ordered],
        "files": [
            {"batchId": e.batch_id, "path": f.path, "rows": f.rows, "bytes": f.bytes}
            for e in ordered
            for f in e.files
        ],
    }


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

    @property
    def key(self) -> tuple[str, int]:
        return (self.query_id, self.batch_id)


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
        schema = StructType.fromJson(doc["schema"])
        if name.compacted:
            return _compacted_entries(doc, schema, query_id, described)
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


def _compacted_entries(
    doc: Mapping[str, Any], schema: StructType, query_id: str, described: str
) -> list[ManifestEntry]:
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
        )
        for b in doc["batches"]
    ]
    if files:
        raise CommitLogError(
            f"compacted manifest {described} names files of batches {sorted(files)} it does "
            "not list"
        )
    return entries
