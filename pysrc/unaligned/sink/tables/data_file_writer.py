"""One task attempt's data files of a table: step 1 of the Iceberg and Delta sinks (a task).

:class:`TableTaskWriter` conforms each chunk to the table's columns, splits its rows by
partition value (a file declares one partition value and holds only its rows: a reader that
prunes by it would miss rows otherwise) and writes each partition's rows, in row groups of at
most :data:`ROW_GROUP_ROWS`, to a Parquet file of its own directly under the table's data
folder. At ``prepare`` it closes every file and describes them for the driver with the
statistics the format keeps (from the writer's own footer: the driver reads no file). Nothing
is visible before the driver's table commit names a file; files no commit names are removed
(:mod:`unaligned.sink.tables.leftover_files`).

File names carry the batch, the task, the attempt, a random token and the query id
(:func:`data_file_name`), so attempts never share a file and the clean-up knows whose a file is.
The format's side (columns, partitions, statistics) is a :class:`TableLayout`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from unaligned.sink.tables.table_storage import TableStorage

ROW_GROUP_ROWS = 128 * 1024
"""Rows buffered (over all partition values) before they are written as row groups."""

_NAME = re.compile(
    r"^part-(?P<batch>\d{10})-(?P<partition>\d{5})-(?P<attempt>\d+)-(?P<token>[0-9a-f]{8})"
    r"-(?P<n>\d{3,})-(?P<query>[0-9A-Za-z-]+)\.parquet$"
)


def data_file_name(
    batch_id: int, partition_id: int, attempt: int, token: str, n: int, query_id: str
) -> str:
    return f"part-{batch_id:010d}-{partition_id:05d}-{attempt}-{token}-{n:03d}-{query_id}.parquet"


@dataclass(frozen=True)
class DataFileName:
    """What a data file's name says about it."""

    batch_id: int
    partition_id: int
    attempt: int
    query_id: str


def parse_data_file_name(name: str) -> DataFileName | None:
    """The parts of a name :func:`data_file_name` made, or ``None`` for any other file."""
    match = _NAME.match(name)
    if match is None:
        return None
    return DataFileName(
        int(match["batch"]), int(match["partition"]), int(match["attempt"]), match["query"]
    )


class DataFileSink(Protocol):
    """One open data file of a task."""

    def write(self, rows: pa.Table) -> None: ...

    def finish(self) -> dict[str, Any]:
        """Close the file; its description for the commit (``path`` relative to the table's
        location, ``bytes``, ``rows`` and the format's statistics and partition)."""
        ...

    def discard(self) -> None:
        """Close and delete the file (a failed attempt)."""
        ...


class TableLayout(Protocol):
    """A table as its tasks write it (picklable; built by the driver from the table)."""

    storage: TableStorage

    def conform(self, chunk: pa.RecordBatch) -> pa.Table:
        """The chunk with the table's columns, names and types (a missing nullable column
        filled with nulls); a null in a required column raises
        :class:`unaligned.errors.TableSchemaError`."""
        ...

    def split(self, rows: pa.Table) -> list[tuple[Hashable, pa.Table]]:
        """``rows`` by partition value (one entry for an unpartitioned table)."""
        ...

    def open_file(self, key: Hashable, name: str) -> DataFileSink:
        """A new data file for partition ``key`` named ``name``."""
        ...


class TableTaskWriter:
    """Writes one task attempt's rows to data files of a table (step 1 of the protocol)."""

    def __init__(
        self,
        layout: TableLayout,
        batch_id: int,
        partition_id: int,
        attempt_number: int,
        query_id: str,
    ) -> None:
        self._layout = layout
        self._batch_id = batch_id
        self._partition_id = partition_id
        self._attempt = attempt_number
        self._query_id = query_id
        self._token = uuid.uuid4().hex[:8]
        self._files: dict[Hashable, DataFileSink] = {}
        self._buffers: dict[Hashable, list[pa.Table]] = {}
        self._buffered = 0
        self._rows = 0

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        rows = self._layout.conform(chunk)
        self._rows += rows.num_rows
        for key, part in self._layout.split(rows):
            self._buffers.setdefault(key, []).append(part)
            self._buffered += part.num_rows
        if self._buffered >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        for key, parts in self._buffers.items():
            sink = self._files.get(key)
            if sink is None:
                name = data_file_name(
                    self._batch_id,
                    self._partition_id,
                    self._attempt,
                    self._token,
                    len(self._files),
                    self._query_id,
                )
                sink = self._files[key] = self._layout.open_file(key, name)
            sink.write(pa.concat_tables(parts) if len(parts) > 1 else parts[0])
        self._buffers = {}
        self._buffered = 0

    def between_chunks(self) -> None:
        """Nothing to bound: buffers are capped at ``ROW_GROUP_ROWS`` rows by write_chunk."""

    def prepare(self) -> dict[str, Any]:
        """Close every data file and describe them for the driver."""
        self._flush()
        files = [sink.finish() for sink in self._files.values()]
        return {
            "partition": self._partition_id,
            "attempt": self._attempt,
            "token": self._token,
            "queryId": self._query_id,
            "rows": self._rows,
            "files": files,
        }

    def abort(self) -> None:
        for sink in self._files.values():
            sink.discard()
        self._files = {}

    def close(self) -> None:
        """Nothing held after prepare/abort."""
