"""A read task's decoding of Kafka batches, as
:class:`~unaligned.registry.record_decoding.RecordDecoding` says: each ``key``/``value`` column
is split into Confluent frames (a schema id header first:
:mod:`unaligned.registry.header_ids`) and decoded per writer schema id with that id's decoder
(:mod:`unaligned.registry.codecs`); a row that does not decode either stops the task (FAILFAST,
naming its topic-partition and offset) or becomes a null with the reason and its bytes in the
added columns (PERMISSIVE). Batches are decoded and yielded in slices of :data:`SLICE_ROWS`.
Writer schemas the query started with are known without asking the registry
(:func:`unaligned.registry.connection.schemas.remember`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from unaligned.errors import RecordFormatError, SchemaNotFoundError
from unaligned.registry.avro import vectors as av
from unaligned.registry.codecs import decoder_for
from unaligned.registry.connection.schemas import ColumnReading, remember, writer_schema
from unaligned.registry.framing import split_frames
from unaligned.registry.header_ids import HEADER_NAMES, with_header_ids
from unaligned.registry.options import DecodeMode, RecordFormats, RegistryConfig
from unaligned.registry.record_types import branch_rows, branches_struct

NOT_FRAMED = (
    "no Schema Registry framing (magic byte 0 and a 4-byte schema id) and no schema id header"
)
#: Rows decoded (and yielded) at a time: each field is one pass over the slice's bytes, and a
#: slice of 8,192 records of ~130 bytes stays in the core's cache across the passes (measured
#: on 20-field Avro: 1.05 M records/s in 65,536-row batches, 1.25 M in slices of 8,192).
SLICE_ROWS = 8192


def decode_batches(
    formats: RecordFormats,
    columns: tuple[ColumnReading, ...],
    batches: Iterable[pa.RecordBatch],
    output: StructType,
) -> Iterator[pa.RecordBatch]:
    """Every batch decoded into the Arrow form of ``output``."""
    schema = to_arrow_schema(output, timezone="UTC")
    for reading in columns:
        for _, branch in reading.branches or (("", reading),):
            for known in (branch.reader, *branch.known):
                remember(formats.registry, known)
    for batch in batches:
        for start in range(0, batch.num_rows, SLICE_ROWS):
            piece = batch if batch.num_rows <= SLICE_ROWS else batch.slice(start, SLICE_ROWS)
            yield decode_batch(formats, columns, piece, schema)


def decode_batch(
    formats: RecordFormats,
    columns: tuple[ColumnReading, ...],
    batch: pa.RecordBatch,
    schema: pa.Schema,
) -> pa.RecordBatch:
    """``batch`` (Spark's Kafka schema) decoded into ``schema``."""
    arrays = list(batch.columns)
    names = batch.schema.names
    headers = batch.column(names.index("headers")) if "headers" in names else None
    added: list[pa.Array] = []
    mode = formats.mode
    for reading in columns:
        at = names.index(reading.name)
        target = schema.field(at).type
        values, header_errors = arrays[at], list[tuple[int, str]]()
        if headers is not None:
            name = HEADER_NAMES[reading.name]
            values, header_errors = with_header_ids(values, headers, name, formats.registry)
        decoded, ids, errors = _decode_column(values, reading, formats.registry, target)
        if header_errors:
            errors = sorted(errors + header_errors)
        if errors and mode is DecodeMode.FAILFAST:
            row, reason = errors[0]
            raise _failure(batch, reading, row, reason)
        failed = np.zeros(len(decoded), bool)
        failed[[row for row, _ in errors]] = True
        raw = arrays[at]
        if failed.any():
            decoded = _null_where(decoded, failed)
        arrays[at] = decoded
        # a GUID's schema known under a key of this process only: no id to show
        shown = ids[1] & (ids[0] >= 0)
        added.append(av.fixed_array(ids[0].astype(np.int32), pa.int32(), shown))
        if mode is DecodeMode.PERMISSIVE:
            added.append(_error_strings(len(decoded), errors))
            added.append(_raw_where(raw, failed))
    if headers is not None and "headers" not in schema.names:  # read for the ids only
        del arrays[names.index("headers")]
    return pa.RecordBatch.from_arrays(arrays + added, schema=schema)


def _decode_column(
    values: pa.Array, reading: ColumnReading, registry: RegistryConfig, target: pa.DataType
) -> tuple[pa.Array, tuple[np.ndarray, np.ndarray], list[tuple[int, str]]]:
    """(decoded column, (schema ids, their validity), [(row, reason)] of rows that failed).
    A registry that cannot be reached raises (the task fails): no record is called bad for
    it."""
    frames = split_frames(values)
    reading_state = av.Reading(frames.data, frames.ends)
    branches = reading.branches or (("", reading),)
    parts: dict[str, list[tuple[np.ndarray, pa.Array]]] = {name: [] for name, _ in branches}
    errors: list[tuple[int, str]] = [
        (int(row), NOT_FRAMED) for row in np.flatnonzero(frames.present & ~frames.framed)
    ]
    framed_ids = frames.schema_ids[frames.framed]
    for schema_id in np.unique(framed_ids).tolist():
        rows = np.flatnonzero(frames.framed & (frames.schema_ids == schema_id))
        try:
            routed = branch_rows(branches, schema_id, rows, frames, registry)
        except SchemaNotFoundError:
            errors += [
                (int(row), f"schema id {schema_id} is not in the Schema Registry") for row in rows
            ]
            continue
        except LookupError as exc:
            errors += [(int(row), str(exc)) for row in rows]
            continue
        for name, branch, branch_rows_ in routed:
            reason = None
            try:
                writer = (
                    branch.reader
                    if schema_id == branch.reader.schema_id
                    else writer_schema(registry, schema_id)
                )
                decoder = decoder_for(branch.format, branch.reader, writer)
            except SchemaNotFoundError:
                reason = f"schema id {schema_id} is not in the Schema Registry"
            except ValueError as exc:  # the writer's schema does not resolve to the reader's
                reason = (
                    f"the writer's schema id {schema_id} cannot be read as the reader's "
                    f"{branch.reader.describe()}: {exc}"
                )
            if reason is not None:
                errors += [(int(row), reason) for row in branch_rows_]
                continue
            parts[name].append((branch_rows_, decoder.decode(reading_state, frames, branch_rows_)))
    failed_rows = np.flatnonzero(reading_state.errors)
    errors += [(int(row), reading_state.reason(int(row))) for row in failed_rows]
    errors.sort()
    if reading.branches:
        decoded = branches_struct(len(values), parts, target)
    else:
        decoded = av.scatter(len(values), parts[""], target)
    return decoded, (frames.schema_ids, frames.framed), errors


def _null_where(array: pa.Array, failed: np.ndarray) -> pa.Array:
    """``array`` with the rows ``failed`` null."""
    index = np.arange(len(array), dtype=np.int64)
    return array.take(av.indices_array(index, ~failed))


def _error_strings(n: int, errors: list[tuple[int, str]]) -> pa.Array:
    if not errors:
        return pa.nulls(n, pa.string())
    texts = av.string_array([reason for _, reason in errors])
    index = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    rows = np.array([row for row, _ in errors], np.int64)
    index[rows] = np.arange(len(errors))
    valid[rows] = True
    return texts.take(av.indices_array(index, valid))


def _raw_where(raw: pa.Array, failed: np.ndarray) -> pa.Array:
    """The column's bytes on the rows that failed, null elsewhere (no copy of the bytes)."""
    if not failed.any():
        return pa.nulls(len(raw), pa.binary())
    buffers = raw.buffers()
    bits = np.concatenate([np.zeros(raw.offset, bool), failed])
    bitmap = pa.py_buffer(np.packbits(bits, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), len(raw), [bitmap, buffers[1], buffers[2]], offset=raw.offset
    )


def _failure(
    batch: pa.RecordBatch, reading: ColumnReading, row: int, reason: str
) -> RecordFormatError:
    names = batch.schema.names
    topic = batch.column(names.index("topic"))[row].as_py()
    partition = batch.column(names.index("partition"))[row].as_py()
    offset = batch.column(names.index("offset"))[row].as_py()
    name = reading.name
    return RecordFormatError(
        f"the {name} of {topic}-{partition} at offset {offset} does not decode as "
        f"{reading.format.format.value} with the reader's {reading.reader.describe()}: "
        f"{reason}. Set option mode=PERMISSIVE to read such records as a null {name} with the "
        f"reason in column '{name}Error' and the bytes in '{name}Raw'"
    )
