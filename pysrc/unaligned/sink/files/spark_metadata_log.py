"""The file sink's ``_spark_metadata`` log: the batches Spark's readers see, in Spark's format.

``spark.read.parquet(path)`` (any Spark application) and a file stream source read exactly the
files named by ``<path>/_spark_metadata`` when it exists (``FileStreamSink.hasMetadata``,
``MetadataLogFileIndex``); the layout is :mod:`unaligned.sink.files.spark_log_layout`. Log id
``K`` is a compaction when ``(K + 1) % interval == 0``: it holds every entry of
``[K - interval, K)`` plus its own.

Here log ids are *not* the query's batch ids: queries sharing a path append to one log, each
batch as the next free id, created exclusively (:func:`unaligned._util.fs.create_exclusive`). A
batch's lines name its files ``part-<q>-<batch:010d>-...``, which is how a roll-forward finds an
append made before a crash (:meth:`SparkMetadataLog.append_batch`). An append finds the log's
end by looking up ids from the query's previous position (``LogPosition``), and lists the
directory (which keeps every file of Spark's ``cleanupDelay``, 10 minutes) only to compact, to
delete expired files, or when it cannot tell. ARCHITECTURE.md, "The file sink's readers", has
the protocol, retention and what object stores need.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from unaligned._util.fs import Location, create_exclusive, read_bytes
from unaligned.errors import CommitLogError
from unaligned.sink.files.spark_log_layout import (
    COMPACT_SUFFIX,
    SPARK_METADATA_DIR,
    VERSION_LINE,
    LogFile,
    LogPosition,
    batch_marker,
    compact_interval,
    entry_line,
    fixed_interval,
    is_compaction,
    log_file_name,
)
from unaligned.sink.options import DEFAULT_COMPACT_INTERVAL

logger = logging.getLogger(__name__)

CLEANUP_DELAY_MS = 10 * 60 * 1000
"""Spark's ``spark.sql.streaming.fileSink.log.cleanupDelay`` default: a log file is deleted only
this long after it was written, so a reader that listed it can still read it."""
APPEND_ATTEMPTS = 100
"""Log ids an append tries before it gives up (each failure means another writer took one)."""
_MODIFIED = re.compile(rb'"modificationTime":(\d+)')
"""A line's modification time, without parsing the whole line (compactions read every line)."""


@dataclass(frozen=True)
class LogSettings:
    """How this query writes the shared log. ``compact_interval`` is the default interval; an
    existing log's compaction files decide the one in use, as for Spark's readers."""

    compact_interval: int = DEFAULT_COMPACT_INTERVAL
    retention_ms: int | None = None
    min_batches_to_retain: int = 100


@dataclass(frozen=True)
class _LogEnd:
    """Where an append stands after step 1: the log files from its start on, the next free
    id, the interval that id is named by, the interval once fixed, and the listing when the
    directory was listed (``None``: found by look-ups)."""

    files: Sequence[LogFile]
    next_id: int
    interval: int
    known: int | None
    listing: list[LogFile] | None


class SparkMetadataLog:
    """``<output>/_spark_metadata`` of one output path, written by one query's driver."""

    def __init__(self, output: Location, output_uri: str, settings: LogSettings) -> None:
        self._output = output
        self._dir = output.child(SPARK_METADATA_DIR)
        self._uri = output_uri
        self._settings = settings

    def files(self) -> list[LogFile]:
        """Every log file, by id (temporary files and strays left out)."""
        selector = pafs.FileSelector(self._dir.path, allow_not_found=True)
        found = []
        for info in self._output.filesystem.get_file_info(selector):
            name = info.base_name
            digits = name.removesuffix(COMPACT_SUFFIX)
            if info.type == pafs.FileType.File and digits.isdigit():
                mtime = (info.mtime_ns or 0) // 1_000_000
                found.append(LogFile(int(digits), name, name != digits, mtime))
        return sorted(found, key=lambda f: f.log_id)

    def append_batch(
        self,
        query_id: str,
        batch_id: int,
        files: Sequence[tuple[str, int]],
        modification_ms: int,
        after: LogPosition,
        earlier: Callable[[], Sequence[tuple[str, int, int]]] = lambda: (),
    ) -> LogPosition:
        """Add query ``query_id``'s batch ``batch_id`` (``(name, size)`` of each file under the
        output) to the log once, as the next free log id; returns the id that holds it, with
        the interval once fixed. ``after`` is the query's previous batch's position: no append
        of this batch can be at or before it.

        Idempotent: 1. find the log files after ``after`` and the next free id, by looking
        them up in turn (:meth:`_tail`), else by listing the directory (also when the next id
        is a compaction); look for the batch's lines in them: found -> done. 2. Create the next
        id exclusively, a compaction when the id is one (with this query's expired entries
        left out; then expired log files are deleted). 3. Lost to another writer -> look at
        what it wrote, then try the id after. No id is skipped (Spark's readers need every one
        from the last compaction on) and none is written twice, also with several queries or
        two deciders of this batch at once.

        ``earlier``: ``(name, size, modification ms)`` of every file committed before the log
        existed (an output of an earlier version); log id 0 names them first, so that Spark's
        readers, which read only the log once it exists, still see them.
        """
        marker = batch_marker(query_id, batch_id)
        lines = [entry_line(f"{self._uri}/{name}", size, modification_ms) for name, size in files]
        start = after.log_id + 1
        known = after.interval
        for _ in range(APPEND_ATTEMPTS):
            try:
                end = self._end(start, known)  # 1.
                known = end.known
                found = self._find(end.files, start, marker)
                if found is not None:
                    return LogPosition(found, known)
                log_id, interval = end.next_id, end.interval
                compact = is_compaction(log_id, interval)
                body = lines
                if compact:  # only a listing finds a compaction id next
                    assert end.listing is not None
                    body = self._compacted(log_id, interval, end.listing, lines, query_id)
                if log_id == 0:
                    body = [*self._lines_of(earlier(), exclude=files), *body]
            except FileNotFoundError:
                continue  # a cleanup deleted a listed file: list again
            name = log_file_name(log_id, interval)
            if create_exclusive(self._dir.child(name), b"\n".join([VERSION_LINE, *body])):  # 2.
                if end.listing is None:
                    return LogPosition(log_id, known)
                self._delete_expired(log_id, interval, end.listing)
                written = LogFile(log_id, name, compact, 0)
                return LogPosition(log_id, fixed_interval([*end.listing, written]) or known)
            start = min(start, log_id)  # 3.
        raise CommitLogError(
            f"batch {batch_id} of query {query_id}: no free id in {self._describe()} after "
            f"{APPEND_ATTEMPTS} attempts (other writers took them all)"
        )

    def _end(self, start: int, known: int | None) -> _LogEnd:
        """Step 1 of :meth:`append_batch`: the log files from ``start`` on and the next free id,
        by look-ups (:meth:`_tail`) when the interval is ``known`` and the next id is no
        compaction, else by listing the directory."""
        if known is not None:
            tail = self._tail(start, known)
            if tail is not None and not is_compaction(tail[1], known):
                return _LogEnd(tail[0], tail[1], known, known, None)
        listing = self.files()
        return _LogEnd(
            listing,
            listing[-1].log_id + 1 if listing else 0,
            compact_interval(listing, self._settings.compact_interval),
            fixed_interval(listing) or known,
            listing,
        )

    def _tail(self, start: int, interval: int) -> tuple[list[LogFile], int] | None:
        """The log files from ``start`` on and the next free id, by looking up ids in turn from
        ``start - 1`` (named by ``interval``); ``None`` when that cannot tell: list instead.

        The ids that exist are one run: an append takes the id after the newest, and a cleanup
        deletes only ids below a bound and only files older than ``CLEANUP_DELAY_MS``. So when
        ``start - 1`` exists and was written less than half that delay ago, nothing after it
        was deleted, and the first id missing after it is the next free one."""
        if start < 1:
            return None
        fs = self._output.filesystem
        fresh_after = int(time.time() * 1000) - CLEANUP_DELAY_MS // 2
        found: list[LogFile] = []
        log_id = start - 1
        while True:
            name = log_file_name(log_id, interval)
            info = fs.get_file_info(self._dir.child(name).path)
            if info.type != pafs.FileType.File:
                return (found, log_id) if log_id >= start else None
            mtime = (info.mtime_ns or 0) // 1_000_000
            if log_id < start and mtime < fresh_after:
                return None
            if log_id >= start:
                found.append(LogFile(log_id, name, name != str(log_id), mtime))
            log_id += 1

    def all_lines(self) -> list[dict[str, object]]:
        """Every entry Spark's readers see now (its ``allFiles``): the newest compaction file
        and the files after it."""
        for _ in range(APPEND_ATTEMPTS):
            listing = self.files()
            if not listing:
                return []
            interval = compact_interval(listing, self._settings.compact_interval)
            latest = listing[-1].log_id
            start = max(0, (latest + 1) // interval * interval - 1)
            by_id = {f.log_id: f for f in listing}
            try:
                return [
                    json.loads(line)
                    for log_id in range(start, latest + 1)
                    for line in self._lines(self._required(by_id, log_id, interval, "read"))
                ]
            except FileNotFoundError:
                continue
        raise CommitLogError(f"{self._describe()} kept changing while being read")

    # --- internals -----------------------------------------------------------------------------

    def _lines_of(
        self, found: Sequence[tuple[str, int, int]], exclude: Sequence[tuple[str, int]]
    ) -> list[bytes]:
        skip = {name for name, _ in exclude}
        return [
            entry_line(f"{self._uri}/{name}", size, modified)
            for name, size, modified in found
            if name not in skip
        ]

    def _describe(self) -> str:
        return self._dir.uri or self._dir.path

    def _read(self, file: LogFile) -> bytes:
        data = read_bytes(self._dir.child(file.name))
        if data is None:
            raise FileNotFoundError(file.name)
        return data

    def _lines(self, file: LogFile) -> list[bytes]:
        head, *lines = self._read(file).split(b"\n")
        if head.strip() != VERSION_LINE:
            raise CommitLogError(
                f"{self._describe()}/{file.name} starts with {head[:20]!r}, not {VERSION_LINE!r}:"
                " not a file sink log this version writes"
            )
        return [line for line in lines if line.strip()]

    def _required(
        self, by_id: dict[int, LogFile], log_id: int, interval: int, what: str
    ) -> LogFile:
        """The file of ``log_id``, named as Spark's readers look for it."""
        file = by_id.get(log_id)
        expected = log_file_name(log_id, interval)
        if file is None or file.name != expected:
            raise CommitLogError(
                f"log file {expected} is missing from {self._describe()} (needed to {what} "
                f"the log; compaction interval {interval}): the log was changed by hand or "
                "written with another interval; Spark's readers cannot read it either"
            )
        return file

    def _find(self, listing: Sequence[LogFile], start: int, marker: bytes) -> int | None:
        """The id of the first log file from ``start`` on that holds ``marker``: the newest
        compaction file there (it holds every id before it) and every file after it."""
        candidates = [f for f in listing if f.log_id >= start]
        compacts = [f for f in candidates if f.compact]
        if compacts:
            candidates = [f for f in candidates if f.log_id >= compacts[-1].log_id]
        for file in candidates:
            if marker in self._read(file):
                return file.log_id
        return None

    def _compacted(
        self,
        log_id: int,
        interval: int,
        listing: Sequence[LogFile],
        lines: Sequence[bytes],
        query_id: str,
    ) -> list[bytes]:
        """Every entry of ``[log_id - interval, log_id)`` and ``lines``; with a retention, this
        query's entries older than it are left out (other queries keep theirs: each applies
        its own retention when it compacts)."""
        by_id = {f.log_id: f for f in listing}
        kept: list[bytes] = []
        expired = 0
        own = f"/part-{query_id}-".encode()
        now_ms = int(time.time() * 1000)
        for earlier in range(max(0, log_id - interval), log_id):
            for line in self._lines(self._required(by_id, earlier, interval, "compact")):
                if self._expired(line, own, now_ms):
                    expired += 1
                else:
                    kept.append(line)
        if expired:
            logger.info("log compaction %d: %d expired entries left out", log_id, expired)
        return [*kept, *lines]

    def _expired(self, line: bytes, own: bytes, now_ms: int) -> bool:
        retention = self._settings.retention_ms
        if retention is None or own not in line:
            return False
        found = _MODIFIED.search(line)
        if found is None:
            raise CommitLogError(f"unreadable line in {self._describe()}: {line[:200]!r}")
        return now_ms - int(found.group(1)) > retention

    def _delete_expired(self, current: int, interval: int, listing: Iterable[LogFile]) -> None:
        """Spark's ``deleteExpiredLog``: keep at least ``min_batches_to_retain`` ids, from a
        compaction on; delete older files once ``CLEANUP_DELAY_MS`` old."""
        min_batch = current + 1 - self._settings.min_batches_to_retain
        if interval > min_batch:
            return
        min_compaction = min_batch - (min_batch % interval) - 1
        expired_before = int(time.time() * 1000) - CLEANUP_DELAY_MS
        fs = self._output.filesystem
        for file in listing:
            if file.log_id < min_compaction and file.mtime_ms <= expired_before:
                try:
                    fs.delete_file(self._dir.child(file.name).path)
                except FileNotFoundError:
                    pass
