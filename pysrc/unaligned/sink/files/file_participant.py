"""The Parquet files participant of the two-phase-commit sink (pyarrow, any ``pyarrow.fs``).

Layout under the output ``path``; every name carries the id of the query that wrote it (``<q>``,
Spark's query id from ``<checkpoint>/metadata``, a UUID stable across restarts of one
checkpoint), so queries with different checkpoints can write to the same ``path`` side by side.
The names are built by :mod:`unaligned.sink.files.file_manifest` (compaction:
:mod:`unaligned.sink.files.manifest_compaction`)::

    <path>/_unaligned_staging/<q>/<batchId>/part-<partition>-<attempt>-<random>.parquet.staged
    <path>/part-<q>-<batchId:010d>-<partition:05d>.parquet                              step 2c
    <path>/_spark_metadata/<logId>[.compact]                       step 2d, shared by all queries
    <path>/_unaligned_manifest/<q>-<batchId:010d>.json                                  step 2d
    <path>/_unaligned_manifest/<q>-<throughBatchId:010d>.compacted.json                compaction

Step 1 (task, :mod:`unaligned.sink.files.file_task_writer`): rows go to a staged file unique to the
task attempt, whose name no ``*.parquet`` glob matches; the commit message carries its staged
path, its final name and its row count.
Step 2b (driver): with ``mergeFilesBelow``, a small batch's staged files become one
(:mod:`unaligned.sink.files.file_merge`). Step 2c (after the commit record): each staged file is
renamed to its *deterministic* final name (so a repeated rename after a crash finds the final
file and does nothing). Step 2d: the batch goes into ``_spark_metadata`` once
(:mod:`unaligned.sink.files.spark_metadata_log`: what Spark's readers see), then its manifest entry
is written atomically (what our readers see, :mod:`unaligned.sink.files.committed_files`). Neither
kind of reader lists the data directory, so a final file whose batch is not logged is
invisible to it, and so is every staged file.

Ownership. Recovery and clean-up remove staging only under the query's own
``_unaligned_staging/<q>/``; compaction folds only the query's own entries. Nothing of another
query is ever renamed, deleted or rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql.types import StructType

from unaligned._util import crash_points
from unaligned._util.crash_points import CrashPoint
from unaligned._util.fs import Location, fsync_path, resolve_location
from unaligned.checkpoint import Checkpoint
from unaligned.errors import BarrierError, CommitLogError, SinkConfigurationError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.files.file_manifest import (
    DEFAULT_COMPACT_EVERY,
    DEFAULT_MANIFEST_RETAIN,
    STAGING_DIR,
    check_query_id,
    write_manifest_entry,
)
from unaligned.sink.files.file_merge import merge_small_batch
from unaligned.sink.files.file_task_writer import ROW_GROUP_ROWS, FileTaskWriter
from unaligned.sink.files.manifest_compaction import compact_manifest, log_position
from unaligned.sink.files.spark_log_layout import spark_uri
from unaligned.sink.files.spark_metadata_log import LogSettings, SparkMetadataLog
from unaligned.sink.options import FileTarget

PARTICIPANT = "files"


class FileParticipant:
    """Staged Parquet files as 2PC participants. Picklable: holds options only.

    ``query_id`` names every file this participant writes (the sink builds it with
    :meth:`for_query`). ``log_retain_batches``: ``_spark_metadata`` keeps at least this many
    log ids (Spark's ``minBatchesToRetain``).
    """

    kind = PARTICIPANT

    def __init__(
        self,
        target: FileTarget,
        schema: StructType,
        query_id: str,
        *,
        manifest_retain: int = DEFAULT_MANIFEST_RETAIN,
        compact_every: int = DEFAULT_COMPACT_EVERY,
        log_retain_batches: int = 100,
    ) -> None:
        if manifest_retain < 1 or compact_every < 1:
            raise ValueError("manifest_retain and compact_every must be at least 1")
        self._target = target
        self._schema_json = schema.json()
        self._query_id = check_query_id(query_id)
        self._manifest_retain = manifest_retain
        self._compact_every = compact_every
        self._log_settings = LogSettings(
            compact_interval=target.log_compact_interval,
            retention_ms=target.retention_ms,
            min_batches_to_retain=log_retain_batches,
        )

    @classmethod
    def for_query(
        cls,
        target: FileTarget,
        schema: StructType,
        checkpoint: Checkpoint,
        *,
        log_retain_batches: int = 100,
    ) -> FileParticipant:
        """The sink's participant: names carry the query id read from the checkpoint once
        (``<checkpoint>/metadata``, written by Spark before the first batch is planned)."""
        try:
            query_id = checkpoint.query_id()
        except BarrierError as exc:
            raise SinkConfigurationError(
                f"the file sink names its files after the query id: {exc}"
            ) from exc
        return cls(target, schema, query_id, log_retain_batches=log_retain_batches)

    @property
    def query_id(self) -> str:
        return self._query_id

    def output(self) -> Location:
        return resolve_location(self._target.path)

    def spark_log(self) -> SparkMetadataLog:
        """The output's ``_spark_metadata`` log, as this query writes it."""
        return SparkMetadataLog(self.output(), spark_uri(self._target.path), self._log_settings)

    def describe(self, item: Mapping[str, Any]) -> str:
        return f"staged file {item['staged']} -> {item['final']} ({item['rows']} rows)"

    def item_key(self, item: Mapping[str, Any]) -> str:
        return str(item["staged"])

    def check_at_query_start(self) -> None:
        """Create the output directory (fails early on a bad or read-only path)."""
        output = self.output()
        output.filesystem.create_dir(output.path, recursive=True)

    def warm_up(self) -> None:
        """Nothing: a staging file opens with a local call."""

    def open_task(self, batch_id: int, partition_id: int, attempt_number: int) -> FileTaskWriter:
        writer = FileTaskWriter(
            self.output(),
            self._target.compression,
            batch_id,
            partition_id,
            attempt_number,
            self._query_id,
        )
        writer.begin()
        return writer

    def commit(
        self,
        items: Sequence[Mapping[str, Any]],
        batch_id: int,
        progress: Callable[[int], None],
    ) -> None:
        """Rename every staged file to its final name (idempotent), ``progress(n)`` after each;
        the names come from the items verbatim."""
        output = self.output()
        fs = output.filesystem
        for done, item in enumerate(items, start=1):
            staged = output.child(item["staged"])
            final = output.child(item["final"])
            if fs.get_file_info(staged.path).type == pafs.FileType.File:
                fs.move(staged.path, final.path)
            elif fs.get_file_info(final.path).type != pafs.FileType.File:
                raise CommitLogError(
                    f"batch {batch_id} was decided but neither its staged file {staged.path} nor "
                    f"its final file {final.path} exists: {item['rows']} rows are lost"
                )
            progress(done)
        if items and isinstance(fs, pafs.LocalFileSystem):
            fsync_path(output.path)

    def _record_query_id(self, record: CommitRecord) -> str:
        """This query's id, which every item of the record must name."""
        ids = {item.get("queryId") for item in record.prepared}
        if ids and ids != {self._query_id}:
            raise CommitLogError(
                f"batch {record.batch_id}: its commit record names files of query "
                f"{sorted(str(i) for i in ids)}, but this query's id is {self._query_id!r}"
            )
        return self._query_id

    def consolidate(
        self, items: Sequence[Mapping[str, Any]], batch_id: int
    ) -> list[Mapping[str, Any]]:
        """Step 2b, before the decision: a small batch's staged files merged into one
        (``mergeFilesBelow``, :mod:`unaligned.sink.files.file_merge`), else the items unchanged."""
        return merge_small_batch(
            self.output(),
            items,
            batch_id,
            self._query_id,
            below_bytes=self._target.merge_files_below,
            compression=self._target.compression,
            row_group_rows=ROW_GROUP_ROWS,
        )

    def check_decidable(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Refuse to decide ``batch_id`` if a staged file is missing or not the size its task
        reported (it could not be renamed into place): abort every item, then raise."""
        output = self.output()
        broken = []
        for item in items:
            info = output.filesystem.get_file_info(output.child(item["staged"]).path)
            if info.type != pafs.FileType.File or info.size != item["bytes"]:
                broken.append(str(item["staged"]))
        if not broken:
            return
        self.abort(items, batch_id)
        raise CommitLogError(
            f"batch {batch_id} was not decided: staged file(s) {', '.join(broken)} are missing "
            "or changed since their task prepared them. Nothing of the batch was published; it "
            "runs again when the query restarts"
        )

    def finish_batch(self, record: CommitRecord) -> None:
        """Step 2d: make the batch visible, each time whole. Idempotent (a roll-forward runs it
        again):

        i. add its files to ``_spark_metadata`` once, searching from the query's previous
           batch's position (what Spark's readers see; an empty batch adds nothing), with the
           decision's time as every file's ``modificationTime`` (so ``retention`` keeps or
           drops the batch whole);
        ii. write its manifest entry, with that log position and the log's interval (what our
            readers see; the next batch's append starts there).
        """
        query_id = self._record_query_id(record)
        output = self.output()
        position = log_position(output, query_id, record.batch_id)
        files = [(str(item["final"]), int(item["bytes"])) for item in record.prepared]
        if files:
            position = self.spark_log().append_batch(
                query_id,
                record.batch_id,
                files,
                record.decided_at_ms,
                position,
                earlier=lambda: _committed_before_the_log(output),
            )
        crash_points.reach(CrashPoint.DRIVER_AFTER_SPARK_LOG, record.batch_id)
        write_manifest_entry(
            output,
            record.batch_id,
            query_id,
            self._schema_json,
            record.prepared,
            decided_at_ms=record.decided_at_ms,
            spark_log=position.log_id,
            spark_log_interval=position.interval,
        )

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Delete the staged files of an undecided batch."""
        output = self.output()
        for item in items:
            try:
                output.filesystem.delete_file(output.child(item["staged"]).path)
            except FileNotFoundError:
                pass

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        """Remove this query's staging directories of batches <= ``up_to_batch`` (``None``: all),
        then compact this query's manifest entries.

        A batch decided but not finished keeps its staging directory (its roll-forward renames
        from there); what else is in the query's staging is from failed, denied or undecided
        attempts, or left over after the renames. Returns how many directories were removed.
        """
        keep = set(log.unfinished_batch_ids())
        output = self.output()
        fs = output.filesystem

        def in_range(batch_id: int) -> bool:
            return batch_id not in keep and (up_to_batch is None or batch_id <= up_to_batch)

        removed = 0
        for batch_id, path in _batch_dirs(output, f"{STAGING_DIR}/{self._query_id}"):
            if in_range(batch_id):
                fs.delete_dir(path)
                removed += 1
        self.compact_manifest(keep, up_to_batch)
        return removed

    def compact_manifest(self, unfinished: set[int], up_to_batch: int | None) -> int:
        """Compact this query's manifest entries
        (:func:`unaligned.sink.files.manifest_compaction.compact_manifest`, which has the rules)
        with this participant's ``manifest_retain`` and ``compact_every``. Returns how many entries
        were folded."""
        return compact_manifest(
            self.output(),
            self._query_id,
            retain=self._manifest_retain,
            compact_every=self._compact_every,
            unfinished=unfinished,
            up_to_batch=up_to_batch,
            retention_ms=self._target.retention_ms,
        )

    def committed_batch_ids(self) -> list[int]:
        """Batches this participant's query published."""
        from unaligned.sink.files.committed_files import manifest_entries

        return sorted(
            e.batch_id for e in manifest_entries(self.output()) if e.query_id == self._query_id
        )


def _committed_before_the_log(output: Location) -> list[tuple[str, int, int]]:
    """Every file the manifest names (every query's), for a log that does not exist yet: an
    output written before this version kept ``_spark_metadata``."""
    from unaligned.sink.files.committed_files import manifest_entries

    return [(f.path, f.bytes, e.expiry_base_ms) for e in manifest_entries(output) for f in e.files]


def _batch_dirs(output: Location, relative: str) -> list[tuple[int, str]]:
    """``(batch id, path)`` of every directory named by a batch id directly under ``relative``."""
    selector = pafs.FileSelector(output.child(relative).path, allow_not_found=True)
    return [
        (int(info.base_name), info.path)
        for info in output.filesystem.get_file_info(selector)
        if info.type == pafs.FileType.Directory and info.base_name.isdigit()
    ]
