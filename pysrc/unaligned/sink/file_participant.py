"""The Parquet files participant of the two-phase-commit sink (pyarrow, any ``pyarrow.fs``).

Layout under the output ``path``::

    <path>/_unaligned_staging/<batchId>/part-<partition>-<attempt>-<random>.parquet   step 1
    <path>/part-<batchId:010d>-<partition:05d>.parquet                               step 2
    <path>/_unaligned_manifest/<batchId:010d>.json                                    step 2

Step 1 (task): rows go to a staging file unique to the task attempt; the commit message carries
its staged path, its final name and its row count. Step 2 (driver, after the commit record):
each staged file is renamed to its *deterministic* final name (so a repeated rename after a crash
finds the final file and does nothing), then the batch's manifest entry is written atomically.
Only files named by a manifest entry are committed: readers (:mod:`unaligned.sink.committed_files`)
never list the directory, so a final file whose manifest entry is not written yet is invisible,
and so is every staging file. Directories starting with ``_`` are also skipped by Spark's own
Parquet reader.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.types import StructType

from unaligned._fs import Location, atomic_write, numbered_files, resolve_location
from unaligned.errors import CommitLogError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import FileTarget

PARTICIPANT = "files"
STAGING_DIR = "_unaligned_staging"
MANIFEST_DIR = "_unaligned_manifest"
MANIFEST_VERSION = 1
ROW_GROUP_ROWS = 128 * 1024
"""Rows a task buffers before writing a Parquet row group (chunks are smaller)."""


def final_name(batch_id: int, partition_id: int) -> str:
    return f"part-{batch_id:010d}-{partition_id:05d}.parquet"


def manifest_name(batch_id: int) -> str:
    return f"{batch_id:010d}.json"


class FileTaskWriter:
    """Writes one task attempt's rows to one staging Parquet file (Step 1 of the protocol)."""

    def __init__(
        self,
        output: Location,
        compression: str,
        batch_id: int,
        partition_id: int,
        attempt_number: int,
    ) -> None:
        self._output = output
        self._compression = compression
        self._batch_id = batch_id
        self._partition_id = partition_id
        name = f"part-{partition_id:05d}-{attempt_number}-{uuid.uuid4().hex[:12]}.parquet"
        self._staged = output.child(STAGING_DIR, str(batch_id), name)
        self._stream: Any | None = None
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._rows = 0

    def begin(self) -> None:
        fs = self._output.filesystem
        fs.create_dir(self._staged.path.rpartition("/")[0], recursive=True)
        self._stream = fs.open_output_stream(self._staged.path)

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        if self._writer is None:
            assert self._stream is not None, "begin() first"
            self._writer = pq.ParquetWriter(
                self._stream, chunk.schema, compression=self._compression
            )
        self._buffer.append(chunk)
        self._buffered_rows += chunk.num_rows
        self._rows += chunk.num_rows
        if self._buffered_rows >= ROW_GROUP_ROWS:
            self._write_buffer()

    def _write_buffer(self) -> None:
        if self._buffer and self._writer is not None:
            self._writer.write_table(pa.Table.from_batches(self._buffer))
        self._buffer = []
        self._buffered_rows = 0

    def between_chunks(self) -> None:
        """Nothing to bound: the buffer is capped at ``ROW_GROUP_ROWS`` rows by write_chunk."""

    def prepare(self) -> dict[str, Any]:
        """Close the staging file (complete Parquet footer) and describe it for the driver."""
        self._write_buffer()
        if self._writer is not None:
            self._writer.close()
        if self._stream is not None:
            self._stream.close()
        fs = self._output.filesystem
        size = fs.get_file_info(self._staged.path).size
        return {
            "staged": f"{STAGING_DIR}/{self._batch_id}/{self._staged.path.rpartition('/')[2]}",
            "final": final_name(self._batch_id, self._partition_id),
            "rows": self._rows,
            "bytes": size,
            "partition": self._partition_id,
        }

    def abort(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if self._stream is not None and not self._stream.closed:
                self._stream.close()
        finally:
            try:
                self._output.filesystem.delete_file(self._staged.path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Nothing held after prepare/abort."""


class FileParticipant:
    """Staged Parquet files as 2PC participants. Picklable: holds options only."""

    kind = PARTICIPANT

    def __init__(self, target: FileTarget, schema: StructType) -> None:
        self._target = target
        self._schema_json = schema.json()

    def output(self) -> Location:
        return resolve_location(self._target.path)

    def describe(self, item: Mapping[str, Any]) -> str:
        return f"staged file {item['staged']} -> {item['final']} ({item['rows']} rows)"

    def item_key(self, item: Mapping[str, Any]) -> str:
        return str(item["staged"])

    def check_at_query_start(self) -> None:
        """Create the output directory (fails early on a bad or read-only path)."""
        output = self.output()
        output.filesystem.create_dir(output.path, recursive=True)

    def open_task(self, batch_id: int, partition_id: int, attempt_number: int) -> FileTaskWriter:
        writer = FileTaskWriter(
            self.output(), self._target.compression, batch_id, partition_id, attempt_number
        )
        writer.begin()
        return writer

    def commit(
        self,
        items: Sequence[Mapping[str, Any]],
        batch_id: int,
        progress: Callable[[int], None],
    ) -> None:
        """Rename every staged file to its final name (idempotent), ``progress(n)`` after each."""
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
            _fsync_dir(output.path)

    def finish_batch(self, record: CommitRecord) -> None:
        """Write the batch's manifest entry: from now on its files are visible to readers."""
        entry = {
            "version": MANIFEST_VERSION,
            "batchId": record.batch_id,
            "schema": json.loads(self._schema_json),
            "files": [
                {"path": item["final"], "rows": item["rows"], "bytes": item["bytes"]}
                for item in sorted(record.prepared, key=lambda i: i["final"])
            ],
        }
        location = self.output().child(MANIFEST_DIR, manifest_name(record.batch_id))
        atomic_write(location, json.dumps(entry, sort_keys=True).encode("utf-8"))

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        """Delete the staged files of an undecided batch."""
        output = self.output()
        for item in items:
            try:
                output.filesystem.delete_file(output.child(item["staged"]).path)
            except FileNotFoundError:
                pass

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        """Remove staging directories of batches <= ``up_to_batch`` (``None``: all).

        A batch decided but not finished keeps its staging directory (its roll-forward renames
        from there); what else is in staging is from failed, denied or undecided attempts, or
        left over after the renames. Returns how many directories were removed.
        """
        keep = set(log.unfinished_batch_ids())
        output = self.output()
        staging = output.child(STAGING_DIR)
        selector = pafs.FileSelector(staging.path, allow_not_found=True, recursive=False)
        removed = 0
        for info in output.filesystem.get_file_info(selector):
            if info.type != pafs.FileType.Directory or not info.base_name.isdigit():
                continue
            batch_id = int(info.base_name)
            if batch_id in keep:
                continue
            if up_to_batch is None or batch_id <= up_to_batch:
                output.filesystem.delete_dir(info.path)
                removed += 1
        return removed

    def committed_batch_ids(self) -> list[int]:
        return manifest_batch_ids(self.output())


def manifest_batch_ids(output: Location) -> list[int]:
    return numbered_files(output.child(MANIFEST_DIR))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
