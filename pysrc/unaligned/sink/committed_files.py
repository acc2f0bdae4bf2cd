"""Read back exactly what the file sink committed: the files its manifest names, nothing else.

The file sink (:mod:`unaligned.sink.file_participant`) writes one manifest entry per committed
micro-batch, ``<path>/_unaligned_manifest/<batchId>.json``, after the batch's files have their
final names. Readers list the manifest directory, never the data directory, so staged files of
undecided or failed attempts and final files of a batch whose manifest entry is not written yet
are invisible.

Two ways in:

- :func:`read_committed_files` (``unaligned.read_committed_files(path)``): a ``pyarrow.Table``.
- ``spark.read.format("unaligned").option("path", ...).load()``: :class:`CommittedFilesReader`,
  one Spark partition per committed file, schema from the newest manifest entry
  (:func:`committed_files_schema`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from unaligned._fs import Location, read_bytes, resolve_location
from unaligned.errors import CommitLogError, OptionError
from unaligned.sink.file_participant import (
    MANIFEST_DIR,
    MANIFEST_VERSION,
    manifest_batch_ids,
    manifest_name,
)
from unaligned.sink.options import absolute_path

READ_BATCH_ROWS = 64 * 1024


@dataclass(frozen=True)
class CommittedFile:
    """One committed Parquet file: its path relative to the output path and its row count."""

    batch_id: int
    path: str
    rows: int


@dataclass(frozen=True)
class ManifestEntry:
    batch_id: int
    schema: StructType
    files: tuple[CommittedFile, ...]


def _location(path: str, filesystem: pafs.FileSystem | None) -> Location:
    return resolve_location(path, filesystem)


def read_manifest_entry(output: Location, batch_id: int) -> ManifestEntry:
    location = output.child(MANIFEST_DIR, manifest_name(batch_id))
    name = location.uri or location.path
    data = read_bytes(location)
    if data is None:
        raise CommitLogError(f"manifest entry {name} disappeared while reading")
    try:
        doc = json.loads(data.decode("utf-8"))
        if doc["version"] != MANIFEST_VERSION:
            raise CommitLogError(f"manifest entry {name} has unsupported version {doc['version']}")
        return ManifestEntry(
            batch_id=int(doc["batchId"]),
            schema=StructType.fromJson(doc["schema"]),
            files=tuple(
                CommittedFile(int(doc["batchId"]), str(f["path"]), int(f["rows"]))
                for f in doc["files"]
            ),
        )
    except CommitLogError:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise CommitLogError(f"manifest entry {name} is unreadable: {exc!r}") from exc


def manifest_entries(output: Location) -> list[ManifestEntry]:
    """Every committed batch's manifest entry, by batch id."""
    return [read_manifest_entry(output, b) for b in manifest_batch_ids(output)]


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
    """The Spark schema of the newest committed batch under option ``path``."""
    path = _path_option(options)
    output = _location(path, None)
    batches = manifest_batch_ids(output)
    if not batches:
        raise CommitLogError(
            f"no committed batch under {path!r} ({MANIFEST_DIR} is empty or missing): nothing "
            "to infer a schema from; give one with .schema(...)"
        )
    return read_manifest_entry(output, batches[-1]).schema


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
    arrays = [batch.column(name).cast(field.type) for name, field in zip(target.names, target, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def describe_committed(path: str) -> dict[str, Any]:
    """Committed batches, files and rows under ``path`` (for logs and benchmarks)."""
    entries = manifest_entries(_location(path, None))
    return {
        "batches": [e.batch_id for e in entries],
        "files": sum(len(e.files) for e in entries),
        "rows": sum(f.rows for e in entries for f in e.files),
    }
