"""A Delta table as its tasks write it: files, partition folders and add-action statistics.

:class:`DeltaLayout` (built by the driver from the table, pickled into every task) conforms a
chunk to the table's columns, splits it by the values of the partition columns (Delta keeps
them in the log, not in the files: ``<col>=<value>/`` folders, Hive's escaping, ``null`` as
``__HIVE_DEFAULT_PARTITION__``) and opens one Parquet file per value through pyarrow. At the
end a file is described as an add action: path relative to the table, size, partition values
as Delta's strings, and the ``stats`` JSON (``numRecords``, ``minValues``, ``maxValues``,
``nullCount``) computed from the writer's own footer. Min and max are kept for numbers, dates,
timestamps and strings of at most :data:`STRING_STATS_CHARS` characters (a longer one would
need Delta's truncation rules); never for binary, nested or floating NaN values.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from unaligned.sink.tables.schema_fit import conform_rows
from unaligned.sink.tables.table_storage import TableStorage

STRING_STATS_CHARS = 32
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class DeltaLayout:
    """The table's columns (``schema``, partition columns included), its partition columns,
    where it lives and the Parquet compression."""

    storage: TableStorage
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    compression: str
    table: str

    def conform(self, chunk: pa.RecordBatch) -> pa.Table:
        return conform_rows(chunk, self.schema, self.table)

    def split(self, rows: pa.Table) -> list[tuple[Hashable, pa.Table]]:
        if not self.partition_columns:
            return [((), rows)]
        keys = rows.select(list(self.partition_columns))
        unique = keys.group_by(list(self.partition_columns)).aggregate([]).to_pylist()
        data = rows.drop_columns(list(self.partition_columns))
        parts: list[tuple[Hashable, pa.Table]] = []
        for values in unique:
            mask = None
            for column in self.partition_columns:
                value = values[column]
                test = (
                    pc.is_null(keys.column(column))
                    if value is None
                    else pc.equal(keys.column(column), pa.scalar(value, keys.column(column).type))
                )
                mask = test if mask is None else pc.and_(mask, test)
            key = tuple(partition_string(values[c]) for c in self.partition_columns)
            parts.append((key, data.filter(mask)))
        return parts

    def open_file(self, key: Hashable, name: str) -> DeltaFileSink:
        assert isinstance(key, tuple)
        values = dict(zip(self.partition_columns, key, strict=True))
        folder = "/".join(
            f"{_escape(c)}={_escape(v) if v is not None else NULL_PARTITION}"
            for c, v in values.items()
        )
        relative = f"{folder}/{name}" if folder else name
        return DeltaFileSink(self, relative, values)


class DeltaFileSink:
    """One Parquet data file of a Delta table, described as an add action at the end."""

    def __init__(self, layout: DeltaLayout, relative: str, values: dict[str, str | None]) -> None:
        self._layout = layout
        self._relative = relative
        self._values = values
        self._fs = layout.storage.filesystem()
        self._path = layout.storage.child(relative)
        self._fs.create_dir(self._path.rpartition("/")[0], recursive=True)
        self._stream = self._fs.open_output_stream(self._path)
        self._writer: pq.ParquetWriter | None = None

    def write(self, rows: pa.Table) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._stream, rows.schema, compression=self._layout.compression
            )
        self._writer.write_table(rows)

    def finish(self) -> dict[str, Any]:
        assert self._writer is not None, "a data file opens with its first rows"
        self._writer.close()
        # the footer the writer just wrote (pyarrow keeps it on the writer: no read back)
        metadata = getattr(getattr(self._writer, "writer", None), "metadata", None)
        self._stream.close()
        size = self._fs.get_file_info(self._path).size
        if metadata is None:
            metadata = pq.read_metadata(self._path, filesystem=self._fs)
        return {
            "path": self._relative,
            "bytes": size,
            "rows": metadata.num_rows,
            "partitionValues": self._values,
            "stats": delta_stats(metadata),
        }

    def discard(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if not self._stream.closed:
                self._stream.close()
        finally:
            try:
                self._fs.delete_file(self._path)
            except FileNotFoundError:
                pass


def partition_string(value: Any) -> str | None:
    """A partition value as Delta's log writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return str(value.isoformat(sep=" ", timespec="microseconds"))
    if isinstance(value, (dt.date, dt.time)):
        return str(value.isoformat())
    if isinstance(value, bytes):
        return bytes(value).decode("latin-1")
    return str(value)


def _escape(text: str) -> str:
    """A partition folder's part, escaped as delta-rs escapes it (``a b`` -> ``a%20b``)."""
    return quote(text, safe="-_.~")


def log_path(relative: str) -> str:
    """A file's path as the Delta log writes it: URI-encoded (``%`` -> ``%25``)."""
    return quote(relative, safe="/=-_.~")


def delta_stats(metadata: pq.FileMetaData) -> str:
    """The add action's ``stats`` JSON from a file's footer (top-level columns only)."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    unusable: set[str] = set()
    for r in range(metadata.num_row_groups):
        group = metadata.row_group(r)
        for c in range(group.num_columns):
            column = group.column(c)
            name = column.path_in_schema
            if "." in name:
                unusable.add(name.split(".")[0])
                continue
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                unusable.add(name)
                continue
            nulls[name] = nulls.get(name, 0) + stats.null_count
            if not stats.has_min_max:
                continue
            low, high = _json_value(stats.min), _json_value(stats.max)
            if low is None or high is None:
                unusable.add(f"minmax:{name}")
                continue
            mins[name] = low if name not in mins else min(mins[name], low, key=_order)
            maxs[name] = high if name not in maxs else max(maxs[name], high, key=_order)
    for name in unusable:
        base = name.removeprefix("minmax:")
        mins.pop(base, None)
        maxs.pop(base, None)
        if not name.startswith("minmax:"):
            nulls.pop(base, None)
    # a column whose every row group is all-null has no min/max: fine, Delta reads none
    return json.dumps(
        {
            "numRecords": metadata.num_rows,
            "minValues": {k: _render(v) for k, v in mins.items()},
            "maxValues": {k: _render(v) for k, v in maxs.items()},
            "nullCount": nulls,
        },
        separators=(",", ":"),
    )


def _json_value(value: Any) -> Any:
    """A statistic the stats JSON can carry, or ``None``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, str):
        return value if len(value) <= STRING_STATS_CHARS else None
    if isinstance(value, (dt.datetime, dt.date)):
        return value
    return None


def _order(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value


def _render(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return value
