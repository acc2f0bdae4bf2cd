"""The file sink's names and manifest: per-query naming, the legacy layout, entries, compaction.

Every name the file sink uses under its output ``path`` is built here: staging directories
(:func:`staging_dir`), committed data files (:func:`final_name`), manifest entries
(:func:`manifest_name`) and compacted manifest files (:func:`compacted_manifest_name`). Each
carries the query id ``<q>`` (:func:`check_query_id`); the layout and the protocol steps that
write it are in :mod:`unaligned.sink.file_participant`. This module also writes manifest
entries (:func:`write_manifest_entry`) and compacts them (:func:`compact_manifest`); reading
them back is :mod:`unaligned.sink.committed_files`.

Compaction. A long-running query would add one manifest entry per batch forever. After a batch
is done, the participant's clean-up folds the query's finished entries older than its newest
``manifest_retain`` into one compacted file, once more than ``manifest_retain + compact_every``
entries are live. The compacted file holds the previous compacted file's batches plus the folded
ones; it is written atomically (:func:`unaligned._fs.atomic_write`) *before* the older compacted
file and the folded entries are deleted. So every listing of the manifest directory covers every
committed batch at least once; readers de-duplicate by ``(query id, batch id)`` (a batch may be
listed both in a compacted file and as an entry not yet deleted) and list again when a listed
file disappears under them.

Layout of older versions (no query id; every name function builds it for ``query_id=None``),
still read and continued::

    <path>/_unaligned_staging/<batchId>/part-<partition>-<attempt>-<random>.parquet
    <path>/part-<batchId:010d>-<partition:05d>.parquet
    <path>/_unaligned_manifest/<batchId:010d>.json

Rule for those *legacy* names: a legacy manifest entry belongs to no query id; every reader
reads it once (key ``(None, batch id)``), and no query compacts or deletes it. A query restarted
from a checkpoint that an older version wrote has the same query id; what its commit records
decided with legacy names (items without ``queryId``) is rolled forward under the same legacy
names (the same final files, the same legacy manifest entry - idempotent, never a second entry
for the batch), and every batch it decides from then on uses its query id. A legacy staging
directory ``_unaligned_staging/<batchId>/`` is removed only by a query whose own commit log has
batch ``batchId`` done (the query re-ran that batch under its new names, or rolled it forward):
then whatever is staged there is a leftover of that very query. Do not run an older version
of the package on the same ``path`` at the same time as this one: older versions do not know
query ids and overwrite each other's names.
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
_LEGACY_ENTRY = re.compile(r"^(?P<batch>\d+)\.json$")
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


def final_name(batch_id: int, partition_id: int, query_id: str | None = None) -> str:
    """A committed data file's name (``query_id=None``: the legacy name)."""
    if query_id is None:
        return f"part-{batch_id:010d}-{partition_id:05d}.parquet"
    return f"part-{query_id}-{batch_id:010d}-{partition_id:05d}.parquet"


def manifest_name(batch_id: int, query_id: str | None = None) -> str:
    """A batch's manifest entry name in ``MANIFEST_DIR`` (``query_id=None``: the legacy name)."""
    if query_id is None:
        return f"{batch_id:010d}.json"
    return f"{query_id}-{batch_id:010d}.json"


def compacted_manifest_name(query_id: str, through_batch_id: int) -> str:
    """A compacted manifest file: the query's batches up to ``through_batch_id``."""
    return f"{query_id}-{through_batch_id:010d}.compacted.json"


def staging_dir(batch_id: int, query_id: str | None = None) -> str:
    """A batch's staging directory relative to the output (``None``: the legacy one)."""
    if query_id is None:
        return f"{STAGING_DIR}/{batch_id}"
    return f"{STAGING_DIR}/{query_id}/{batch_id}"


@dataclass(frozen=True)
class ManifestName:
    """A parsed file name in ``MANIFEST_DIR``: an entry (one batch) or a compacted file (every
    batch up to ``batch_id``). ``query_id`` is ``None`` for a legacy entry."""

    name: str
    query_id: str | None
    batch_id: int
    compacted: bool

    @property
    def key(self) -> tuple[str | None, int]:
        return (self.query_id, self.batch_id)


def parse_manifest_name(name: str) -> ManifestName | None:
    """``None`` for what is not a manifest file (temporary files of atomic writes, strays)."""
    for pattern, compacted in ((_COMPACTED, True), (_ENTRY, False), (_LEGACY_ENTRY, False)):
        match = pattern.match(name)
        if match:
            query = match.groupdict().get("query")
            return ManifestName(name, query, int(match.group("batch")), compacted)
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
    query_id: str | None,
    schema_json: str,
    items: Sequence[Mapping[str, Any]],
) -> None:
    """Write batch ``batch_id``'s manifest entry atomically: the committed files of ``items``
    (the commit record's prepared items) under the query's name (``None``: the legacy name)."""
    entry: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "batchId": batch_id,
        "committedAtMs": int(time.time() * 1000),
        "schema": json.loads(schema_json),
        "files": [
            {"path": item["final"], "rows": item["rows"], "bytes": item["bytes"]}
            for item in sorted(items, key=lambda i: i["final"])
        ],
    }
    if query_id is not None:
        entry["queryId"] = query_id
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
    """One committed batch of one query (``query_id`` ``None``: a legacy entry)."""

    batch_id: int
    schema: StructType
    files: tuple[CommittedFile, ...]
    query_id: str | None = None
    committed_at_ms: int = 0

    @property
    def key(self) -> tuple[str | None, int]:
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
        query_id = doc.get("queryId")
        if query_id != name.query_id or bool(doc.get("compacted", False)) != name.compacted:
            raise CommitLogError(
                f"manifest file {described} holds query {query_id!r} "
                f"({'compacted' if doc.get('compacted') else 'entry'}), not what its name says"
            )
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


def _committed_file(doc: Mapping[str, Any], batch_id: int, query_id: str | None) -> CommittedFile:
    return CommittedFile(
        batch_id, str(doc["path"]), int(doc["rows"]), int(doc.get("bytes", 0)), query_id
    )


def _compacted_entries(
    doc: Mapping[str, Any], schema: StructType, query_id: str | None, described: str
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
