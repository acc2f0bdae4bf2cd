"""Read back exactly what the file sink committed: the files its manifest names, nothing else.

Readers list the manifest directory ``<path>/_unaligned_manifest/`` (names and format:
:mod:`unaligned.sink.files.file_manifest`), never the data directory, so staged files and final
files whose entry is not written yet are invisible. Every committed batch of every query that wrote
to ``path`` is read once, keyed by ``(query id, batch id)`` (a batch may be listed both in a
compacted file and as an entry not deleted yet); a file that disappears between the listing and
the read makes the reader list again. Order: by query id, then batch, then file.
:func:`read_committed_files` (``unaligned.read_committed_files(path)``) returns a
``pyarrow.Table``; :class:`CommittedFilesReader` serves ``spark.read.format("unaligned")``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from unaligned._util.fs import Location, absolute_path, resolve_location
from unaligned.errors import CommitLogError, OptionError
from unaligned.sink.files.file_manifest import (
    MANIFEST_DIR,
    ManifestEntry,
    list_manifest,
    read_manifest_file,
)

READ_BATCH_ROWS = 64 * 1024
LISTING_ATTEMPTS = 10
"""How often a reader lists the manifest again when listed files disappear under it."""


def _location(path: str, filesystem: pafs.FileSystem | None) -> Location:
    return resolve_location(path, filesystem)


def manifest_entries(output: Location) -> list[ManifestEntry]:
    """Every committed batch of every query, each once, by query id, then by batch id."""
    for _ in range(LISTING_ATTEMPTS):
        batches: dict[tuple[str, int], ManifestEntry] = {}
        try:
            # Entries after compacted files: a live entry and its compacted copy are the same.
            for name in sorted(list_manifest(output), key=lambda m: not m.compacted):
                for entry in read_manifest_file(output, name):
                    batches[entry.key] = entry
        except FileNotFoundError:
            continue  # replaced by a compaction since the listing: list again
        return [batches[key] for key in sorted(batches)]
    raise CommitLogError(
        f"the manifest under {output.uri or output.path} kept changing while being read "
        f"({LISTING_ATTEMPTS} listings)"
    )


def read_committed_files(
    path: str,
    *,
    columns: Sequence[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> pa.Table:
    """Every row the file sink committed under ``path``, in batch then partition order.

    ``path`` is what was given to the sink (local path or URI); ``filesystem`` makes ``path`` a
    path inside that filesystem instead. An output with no committed batch yields an empty table
    with no columns.
    """
    output = _location(path, filesystem)
    tables = []
    for entry in manifest_entries(output):
        for committed in entry.files:
            tables.append(
                pq.read_table(
                    output.child(committed.path).path,
                    columns=list(columns) if columns is not None else None,
                    filesystem=output.filesystem,
                )
            )
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")


def committed_files_schema(options: Mapping[str, str]) -> StructType:
    """The Spark schema of the most recently committed batch under option ``path``."""
    path = _path_option(options)
    entries = manifest_entries(_location(path, None))
    if not entries:
        raise CommitLogError(
            f"no committed batch under {path!r} ({MANIFEST_DIR} is empty or missing): nothing "
            "to infer a schema from; give one with .schema(...)"
        )
    newest = max(range(len(entries)), key=lambda i: (entries[i].committed_at_ms, i))
    return entries[newest].schema


def _path_option(options: Mapping[str, str]) -> str:
    for key, value in options.items():
        if key.lower() == "path" and value.strip():
            return value.strip()
    raise OptionError("spark.read.format('unaligned') needs option 'path' (a file sink's output)")


class CommittedFilePartition(InputPartition):
    """One committed file; picklable (strings only)."""

    def __init__(self, output_path: str, relative_path: str) -> None:
        super().__init__((output_path, relative_path))
        self.output_path = output_path
        self.relative_path = relative_path


class CommittedFilesReader(DataSourceReader):
    """Batch reader of the files the sink committed (one partition per file)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._path = absolute_path(_path_option(options))
        self._schema_json = schema.json()

    def partitions(self) -> Sequence[InputPartition]:
        output = _location(self._path, None)
        return [
            CommittedFilePartition(self._path, committed.path)
            for entry in manifest_entries(output)
            for committed in entry.files
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition, CommittedFilePartition)
        schema = StructType.fromJson(json.loads(self._schema_json))
        target = to_arrow_schema(schema, timezone="UTC")
        location = _location(partition.output_path, None).child(partition.relative_path)
        parquet = pq.ParquetFile(location.path, filesystem=location.filesystem)
        for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, columns=target.names):
            yield _conform(batch, target)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast to exactly the Arrow schema Spark expects (types and nullability)."""
    if batch.schema.equals(target):
        return batch
    arrays = [
        batch.column(name).cast(field.type)
        for name, field in zip(target.names, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def describe_committed(path: str) -> dict[str, Any]:
    """Committed batches, files, rows and writing queries under ``path`` (logs, benchmarks)."""
    entries = manifest_entries(_location(path, None))
    return {
        "batches": [e.batch_id for e in entries],
        "files": sum(len(e.files) for e in entries),
        "rows": sum(f.rows for e in entries for f in e.files),
        "queries": len({e.query_id for e in entries}),
    }
