"""What a file sink's output holds, by query, and the files no reader of ours or Spark's names.

:func:`survey_output` lists the output ``path`` once (the data files at its top, the staging
directories, the manifest, ``_spark_metadata``) and sorts every data file the sink named
(``part-<q>-<batch>-<i>.parquet``) into:

- *committed*: named by the query's manifest or by ``_spark_metadata``;
- *expired*: named by neither any more because ``retention`` left its batch out (the batch is
  at most the query's ``expiredThroughBatchId``); Spark's file sink also leaves such files;
- *orphan*: named by neither. A crash during a batch's renames leaves them until the query's
  restart publishes them; if the checkpoint was deleted meanwhile, nothing ever will, and
  readers that list the directory see them for good.

Staged files (``_unaligned_staging/<q>/``) of a query that is not running are also reported:
invisible to every reader, removed by the query's own recovery, or by
:func:`remove_orphans` once the checkpoint is gone. Nothing here deletes anything unless called
with the queries to clean up (``unaligned remove-orphans``): files of a batch that a crashed
query will roll forward look exactly like orphans, and only the user knows that query is gone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from unaligned._util.fs import Location, resolve_location
from unaligned.sink.files.committed_files import manifest_entries
from unaligned.sink.files.file_manifest import MANIFEST_DIR, STAGING_DIR, list_manifest
from unaligned.sink.files.manifest_compaction import CompactedMarks, compacted_marks
from unaligned.sink.files.spark_log_layout import SPARK_METADATA_DIR
from unaligned.sink.files.spark_metadata_log import LogSettings, SparkMetadataLog

_DATA_FILE = re.compile(r"^part-(?P<query>[0-9A-Za-z_-]+)-(?P<batch>\d{10})-\d{5}\.parquet$")


@dataclass(frozen=True)
class DataFile:
    """A data file the sink named: its name at the top of the output, query and batch."""

    name: str
    query_id: str
    batch_id: int
    bytes: int
    modified_ms: int


@dataclass(frozen=True)
class QueryFiles:
    """One query's share of the output."""

    query_id: str
    committed_batches: tuple[int, ...] = ()
    committed_files: int = 0
    committed_rows: int = 0
    expired_through: int = -1
    expired: tuple[DataFile, ...] = ()
    orphans: tuple[DataFile, ...] = ()
    staged_batches: tuple[int, ...] = ()
    """Batches with a staging directory (a running batch, a crashed one, or left behind)."""
    staged_files: int = 0


@dataclass(frozen=True)
class OutputSurvey:
    path: str
    queries: tuple[QueryFiles, ...]
    spark_log_files: int
    """Files in ``_spark_metadata`` (0: no log, Spark's readers list the directory)."""
    spark_log_entries: int
    """Data files Spark's readers see through the log."""
    other_files: tuple[str, ...] = field(default=())
    """``*.parquet`` files at the top that the sink did not name (another writer's)."""

    @property
    def orphans(self) -> tuple[DataFile, ...]:
        return tuple(f for q in self.queries for f in q.orphans)

    def to_dict(self) -> dict[str, object]:
        """The ``unaligned inspect --json`` document of an output (keys are stable)."""

        def files(found: tuple[DataFile, ...]) -> list[dict[str, object]]:
            return [
                {
                    "name": f.name,
                    "batchId": f.batch_id,
                    "bytes": f.bytes,
                    "modifiedMs": f.modified_ms,
                }
                for f in found
            ]

        return {
            "path": self.path,
            "sparkLog": {"files": self.spark_log_files, "entries": self.spark_log_entries},
            "otherFiles": list(self.other_files),
            "queries": [
                {
                    "queryId": q.query_id,
                    "committedBatches": len(q.committed_batches),
                    "firstBatchId": q.committed_batches[0] if q.committed_batches else None,
                    "lastBatchId": q.committed_batches[-1] if q.committed_batches else None,
                    "committedFiles": q.committed_files,
                    "committedRows": q.committed_rows,
                    "expiredThroughBatchId": q.expired_through,
                    "expired": files(q.expired),
                    "orphans": files(q.orphans),
                    "stagedBatches": list(q.staged_batches),
                    "stagedFiles": q.staged_files,
                }
                for q in self.queries
            ],
        }


def is_file_sink_output(path: str) -> bool:
    """Whether ``path`` holds a file sink's manifest, staging or ``_spark_metadata``."""
    output = resolve_location(path)
    wanted = {MANIFEST_DIR, STAGING_DIR, SPARK_METADATA_DIR}
    try:
        infos = output.filesystem.get_file_info(pafs.FileSelector(output.path))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(i.type == pafs.FileType.Directory and i.base_name in wanted for i in infos)


def survey_output(path: str) -> OutputSurvey:
    """The output at ``path`` as the sink's names say (reads only)."""
    output = resolve_location(path)
    log = SparkMetadataLog(output, "", LogSettings())
    logged = {str(line["path"]).rsplit("/", 1)[-1] for line in log.all_lines()}
    committed: dict[str, list[int]] = defaultdict(list)
    named = set(logged)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for entry in manifest_entries(output):
        committed[entry.query_id].append(entry.batch_id)
        for file in entry.files:
            named.add(file.path)
            counts[entry.query_id][0] += 1
            counts[entry.query_id][1] += file.rows
    marks = _expired_marks(output)
    by_query: dict[str, dict[str, list[DataFile]]] = defaultdict(lambda: defaultdict(list))
    others = []
    for info in output.filesystem.get_file_info(pafs.FileSelector(output.path)):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        match = _DATA_FILE.match(info.base_name)
        if match is None:
            others.append(info.base_name)
            continue
        data = DataFile(
            info.base_name,
            match.group("query"),
            int(match.group("batch")),
            info.size or 0,
            (info.mtime_ns or 0) // 1_000_000,
        )
        if data.name in named:
            continue
        through = marks.get(data.query_id, CompactedMarks(-1, -1)).expired_through
        kind = "expired" if data.batch_id <= through else "orphans"
        by_query[data.query_id][kind].append(data)
    staged = _staging(output)
    query_ids = sorted(set(committed) | set(by_query) | set(staged) | set(marks))
    queries = tuple(
        QueryFiles(
            query_id=q,
            committed_batches=tuple(sorted(committed.get(q, []))),
            committed_files=counts[q][0] if q in counts else 0,
            committed_rows=counts[q][1] if q in counts else 0,
            expired_through=marks.get(q, CompactedMarks(-1, -1)).expired_through,
            expired=tuple(sorted(by_query[q]["expired"], key=lambda f: f.name)),
            orphans=tuple(sorted(by_query[q]["orphans"], key=lambda f: f.name)),
            staged_batches=tuple(sorted(staged.get(q, {}))),
            staged_files=sum(staged.get(q, {}).values()),
        )
        for q in query_ids
    )
    return OutputSurvey(
        path=output.uri or output.path,
        queries=queries,
        spark_log_files=len(log.files()),
        spark_log_entries=len(logged),
        other_files=tuple(sorted(others)),
    )


def remove_orphans(
    path: str, query_ids: Collection[str] | None, *, expired: bool = False, dry_run: bool = False
) -> list[str]:
    """Delete the orphans (and with ``expired`` the expired files) and the staging directory of
    each query in ``query_ids`` (``None``: every query with any), which the caller declares
    gone: never restarted from its checkpoint. Returns the paths (relative to the output)
    deleted, or that would be with ``dry_run``."""
    output = resolve_location(path)
    survey = survey_output(path)
    removed: list[str] = []
    fs = output.filesystem
    for query in survey.queries:
        if query_ids is not None and query.query_id not in query_ids:
            continue
        doomed = [*query.orphans, *(query.expired if expired else ())]
        for data in doomed:
            removed.append(data.name)
            if not dry_run:
                _delete(fs.delete_file, output.child(data.name))
        if query.staged_batches:
            removed.append(f"{STAGING_DIR}/{query.query_id}/")
            if not dry_run:
                _delete(fs.delete_dir, output.child(STAGING_DIR, query.query_id))
    return removed


def _delete(how: Callable[[str], None], location: Location) -> None:
    try:
        how(location.path)
    except FileNotFoundError:
        pass


def _expired_marks(output: Location) -> dict[str, CompactedMarks]:
    marks: dict[str, CompactedMarks] = {}
    for name in list_manifest(output):
        if name.compacted:
            try:
                found = compacted_marks(output, name)
            except FileNotFoundError:
                continue
            marks[name.query_id] = marks.get(name.query_id, CompactedMarks(-1, -1)).merge(found)
    return marks


def _staging(output: Location) -> dict[str, dict[int, int]]:
    """Staged files per query and batch directory."""
    found: dict[str, dict[int, int]] = defaultdict(dict)
    selector = pafs.FileSelector(
        output.child(STAGING_DIR).path, allow_not_found=True, recursive=True
    )
    root = output.child(STAGING_DIR).path.rstrip("/") + "/"
    for info in output.filesystem.get_file_info(selector):
        parts = info.path[len(root) :].split("/")
        if len(parts) >= 2 and parts[1].isdigit():
            batches = found[parts[0]]
            batch = int(parts[1])
            batches[batch] = batches.get(batch, 0) + (info.type == pafs.FileType.File)
    return dict(found)
