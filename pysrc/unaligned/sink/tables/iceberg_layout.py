"""An Iceberg table as its tasks write it: field ids, partition values, data-file statistics.

:class:`IcebergLayout` (built by the driver from the loaded table, pickled into every task as
JSON of the schema and partition spec) conforms a chunk to the table's columns with their
field ids, splits its rows by partition value (each spec field's transform over its source
column, pyiceberg's ``pyarrow_transform``: one file per value, as Iceberg readers prune by
it) and writes each file with pyiceberg's own Parquet writer through the table's ``FileIO``,
which returns the statistics an Iceberg data file carries (column sizes, value, null and NaN
counts, lower and upper bounds as Iceberg serialises them, split offsets). The file's
description is JSON (:func:`encode_data_file`); the driver rebuilds the ``DataFile`` from it
(:func:`decode_data_file`) without reading the file.
"""

from __future__ import annotations

import base64
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from unaligned.sink.tables.schema_fit import conform_rows
from unaligned.sink.tables.table_storage import TableStorage

COMPRESSION_PROPERTY = "write.parquet.compression-codec"


@dataclass(frozen=True)
class IcebergLayout:
    """``storage`` is the table's data folder; the rest describes the table at planning."""

    storage: TableStorage
    schema_json: str
    spec_json: str
    properties: tuple[tuple[str, str], ...]
    io_properties: tuple[tuple[str, str], ...] = field(repr=False)
    compression: str
    table: str
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _schema(self) -> Any:
        if "schema" not in self._cache:
            from pyiceberg.schema import Schema

            self._cache["schema"] = Schema.model_validate_json(self.schema_json)
        return self._cache["schema"]

    def _spec(self) -> Any:
        if "spec" not in self._cache:
            from pyiceberg.partitioning import PartitionSpec

            self._cache["spec"] = PartitionSpec.model_validate_json(self.spec_json)
        return self._cache["spec"]

    def arrow_schema(self) -> pa.Schema:
        if "arrow" not in self._cache:
            from pyiceberg.io.pyarrow import schema_to_pyarrow

            self._cache["arrow"] = schema_to_pyarrow(self._schema(), include_field_ids=True)
        schema: pa.Schema = self._cache["arrow"]
        return schema

    def conform(self, chunk: pa.RecordBatch) -> pa.Table:
        return conform_rows(chunk, self.arrow_schema(), self.table)

    def split(self, rows: pa.Table) -> list[tuple[Hashable, pa.Table]]:
        spec, schema = self._spec(), self._schema()
        if spec.is_unpartitioned():
            return [((), rows)]
        import pyarrow.compute as pc

        keys = {}
        for i, part in enumerate(spec.fields):
            source = schema.find_field(part.source_id)
            column = rows.column(schema.find_column_name(part.source_id))
            keys[f"_p{i}"] = part.transform.pyarrow_transform(source.field_type)(column)
        key_table = pa.table(keys)
        names = list(keys)
        parts: list[tuple[Hashable, pa.Table]] = []
        for values in key_table.group_by(names).aggregate([]).to_pylist():
            mask = None
            for name in names:
                value = values[name]
                test = (
                    pc.is_null(key_table.column(name))
                    if value is None
                    else pc.equal(
                        key_table.column(name), pa.scalar(value, key_table.column(name).type)
                    )
                )
                mask = test if mask is None else pc.and_(mask, test)
            parts.append((tuple(values[n] for n in names), rows.filter(mask)))
        return parts

    def _partition_key(self, key: tuple[Any, ...]) -> Any:
        from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

        spec = self._spec()
        return PartitionKey(
            field_values=[
                PartitionFieldValue(field=f, value=v) for f, v in zip(spec.fields, key, strict=True)
            ],
            partition_spec=spec,
            schema=self._schema(),
        )

    def _io(self) -> Any:
        if "io" not in self._cache:
            from pyiceberg.io import load_file_io

            self._cache["io"] = load_file_io(dict(self.io_properties), self.storage.uri)
        return self._cache["io"]

    def open_file(self, key: Hashable, name: str) -> IcebergFileSink:
        assert isinstance(key, tuple)
        spec = self._spec()
        partition: tuple[str | None, ...] = ()
        if spec.is_unpartitioned():
            relative = name
        else:
            partition_key = self._partition_key(key)
            relative = f"{partition_key.to_path()}/{name}"
            record = partition_key.partition
            types = [f.field_type for f in spec.partition_type(self._schema()).fields]
            partition = tuple(_encode_value(t, record[i]) for i, t in enumerate(types))
        return IcebergFileSink(self, relative, partition)


class IcebergFileSink:
    """One Parquet data file of an Iceberg table, written by pyiceberg's own writer."""

    def __init__(self, layout: IcebergLayout, relative: str, partition: tuple[str | None, ...]):
        from pyiceberg.io.pyarrow import ParquetFormatWriter

        self._layout = layout
        self._relative = relative
        self._partition = partition
        self._uri = f"{layout.storage.uri.rstrip('/')}/{relative}"
        properties = {**dict(layout.properties), COMPRESSION_PROPERTY: layout.compression}
        self._writer = ParquetFormatWriter(
            layout._io().new_output(self._uri), layout._schema(), properties
        )
        self._written = False

    def write(self, rows: pa.Table) -> None:
        self._writer.write(rows)
        self._written = True

    def finish(self) -> dict[str, Any]:
        stats = self._writer.close()
        size = self._layout._io().new_input(self._uri).__len__()
        return encode_data_file(
            self._relative,
            size,
            stats.to_serialized_dict(),
            self._partition,
            self._layout._spec().spec_id,
        )

    def discard(self) -> None:
        try:
            if self._written:
                self._writer.close()
        except Exception:  # the file is deleted anyway
            pass
        try:
            self._layout._io().delete(self._uri)
        except (FileNotFoundError, OSError):
            pass


def _encode_value(field_type: Any, value: Any) -> str | None:
    from pyiceberg.conversions import to_bytes

    return None if value is None else base64.b64encode(to_bytes(field_type, value)).decode()


def encode_data_file(
    relative: str,
    size: int,
    stats: Mapping[str, Any],
    partition: tuple[str | None, ...],
    spec_id: int,
) -> dict[str, Any]:
    """A data file as JSON: ``path`` (below the data folder), ``bytes``, ``rows``, partition
    values (Iceberg's single-value serialisation, base64) and statistics."""

    def ints(values: Mapping[int, int] | None) -> dict[str, int]:
        return {str(k): int(v) for k, v in (values or {}).items()}

    def blobs(values: Mapping[int, bytes] | None) -> dict[str, str]:
        return {str(k): base64.b64encode(v).decode() for k, v in (values or {}).items()}

    return {
        "path": relative,
        "bytes": size,
        "rows": int(stats["record_count"]),
        "specId": spec_id,
        "partition": list(partition),
        "columnSizes": ints(stats.get("column_sizes")),
        "valueCounts": ints(stats.get("value_counts")),
        "nullValueCounts": ints(stats.get("null_value_counts")),
        "nanValueCounts": ints(stats.get("nan_value_counts")),
        "lowerBounds": blobs(stats.get("lower_bounds")),
        "upperBounds": blobs(stats.get("upper_bounds")),
        "splitOffsets": list(stats.get("split_offsets") or []),
    }


def decode_data_file(described: Mapping[str, Any], data_uri: str, table: Any) -> Any:
    """The ``DataFile`` of a description, for ``table`` (the loaded pyiceberg table)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    spec_id = int(described["specId"])
    spec = table.specs()[spec_id]
    types = [f.field_type for f in spec.partition_type(table.schema()).fields]
    values = [
        None if raw is None else from_bytes(t, base64.b64decode(raw))
        for t, raw in zip(types, described["partition"], strict=True)
    ]

    def ints(values: Mapping[str, int]) -> dict[int, int]:
        return {int(k): int(v) for k, v in values.items()}

    def blobs(values: Mapping[str, str]) -> dict[int, bytes]:
        return {int(k): base64.b64decode(v) for k, v in values.items()}

    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{data_uri.rstrip('/')}/{described['path']}",
        file_format=FileFormat.PARQUET,
        partition=Record(*values),
        file_size_in_bytes=int(described["bytes"]),
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        record_count=int(described["rows"]),
        column_sizes=ints(described["columnSizes"]),
        value_counts=ints(described["valueCounts"]),
        null_value_counts=ints(described["nullValueCounts"]),
        nan_value_counts=ints(described["nanValueCounts"]),
        lower_bounds=blobs(described["lowerBounds"]),
        upper_bounds=blobs(described["upperBounds"]),
        split_offsets=list(described["splitOffsets"]),
    )
