"""Avro records of a batch decoded column-wise into one Arrow struct array, resolving the
writer's schema to the reader's (Avro's schema resolution).

:func:`compile_decoder` builds, once per (writer schema, reader schema), a tree of nodes that
mirrors the writer's schema: a record reads its writer's fields in order (a field the reader
lacks is read and dropped, a reader field the writer lacks is its default:
:mod:`unaligned.registry.avro.defaults`), a union reads its branch index and each branch on the
records that took it, an array or map reads its blocks item by item across every record at once
(:mod:`unaligned.registry.avro.blocks`). Every node reads all of its records' cursors in one
numpy operation (:mod:`unaligned.registry.avro.vectors`) and returns an Arrow array of the
reader's type as Spark's ``from_avro`` maps it (:mod:`unaligned.registry.avro.schema`).
Promotions are Avro's (int to long, float or double; long to float or double; float to double;
string and bytes); logical types are read as the reader declares them. A writer schema that
cannot be resolved to the reader's raises :class:`SchemaResolutionError` when compiled; a record
that does not decode gets an error code in the :class:`~unaligned.registry.avro.vectors.Reading`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type

from unaligned.registry.avro import vectors as av
from unaligned.registry.avro.blocks import Read, blocks, min_bytes
from unaligned.registry.avro.defaults import DefaultValueError, constant
from unaligned.registry.avro.schema import (
    Array,
    AvroType,
    Enum,
    Fixed,
    Map,
    Primitive,
    Record,
    Union_,
    is_decimal,
    short_name,
    spark_type,
    type_name,
)
from unaligned.registry.avro.vectors import Reading


class SchemaResolutionError(ValueError):
    """The writer's schema cannot be read as the reader's (names the place and the reason)."""


def arrow_type_of(t: AvroType) -> pa.DataType:
    """The Arrow type Spark expects for ``t`` (through its Spark type)."""
    return to_arrow_type(spark_type(t)[0], timezone="UTC")


def compile_decoder(writer: AvroType, reader: AvroType) -> Read:
    """The reader of records written with ``writer`` as ``reader``'s Arrow type."""
    return _compile(writer, reader, arrow_type_of(reader), "value")


def _is_null(t: AvroType) -> bool:
    return isinstance(t, Primitive) and t.name == "null"


def _compile(w: AvroType, r: AvroType, out: pa.DataType, path: str) -> Read:
    if isinstance(r, Union_):
        return _to_reader_union(w, r, out, path)
    if isinstance(w, Union_):
        return _writer_union(w, r, out, path)
    if isinstance(r, Record):
        if not isinstance(w, Record) or not _names_match(w, r):
            raise _mismatch(w, r, path)
        return _record(w, r, out, path)
    if isinstance(r, Array):
        if not isinstance(w, Array):
            raise _mismatch(w, r, path)
        items = _compile(w.items, r.items, out.value_type, f"{path}[]")
        return blocks(items, None, out, min_bytes(w.items))
    if isinstance(r, Map):
        if not isinstance(w, Map):
            raise _mismatch(w, r, path)
        values = _compile(w.values, r.values, out.item_type, f"{path}{{}}")
        return blocks(values, _string_reader(pa.string()), out, 1)
    if isinstance(r, Enum):
        if not isinstance(w, Enum) or not _names_match(w, r):
            raise _mismatch(w, r, path)
        return _enum(w, r)
    if isinstance(r, Fixed):
        if not isinstance(w, Fixed) or w.size != r.size or not _names_match(w, r):
            raise _mismatch(w, r, path)
        return _fixed(r, out)
    assert isinstance(r, Primitive)
    return _primitive(w, r, out, path)


def _names_match(w: Record | Enum | Fixed, r: Record | Enum | Fixed) -> bool:
    return short_name(w.name) == short_name(r.name) or w.name in r.aliases


def _mismatch(w: AvroType, r: AvroType, path: str) -> SchemaResolutionError:
    return SchemaResolutionError(
        f"at {path} the writer's {type_name(w)} cannot be read as the reader's {type_name(r)}"
    )


# --- primitives -----------------------------------------------------------------------------


_PROMOTIONS = {
    "int": ("int", "long", "float", "double"),
    "long": ("long", "float", "double"),
    "float": ("float", "double"),
    "double": ("double",),
    "string": ("string", "bytes"),
    "bytes": ("bytes", "string"),
    "boolean": ("boolean",),
    "null": ("null",),
}


def _primitive(w: AvroType, r: Primitive, out: pa.DataType, path: str) -> Read:
    if not isinstance(w, (Primitive, Fixed)) or (
        isinstance(w, Primitive) and r.name not in _PROMOTIONS[w.name]
    ):
        raise _mismatch(w, r, path)
    if isinstance(w, Fixed):
        raise _mismatch(w, r, path)
    if r.name == "null":
        return lambda rd, pos, rows: (pa.nulls(len(pos), pa.null()), pos)
    if r.name in ("string", "bytes"):
        return _decimal_bytes(out) if is_decimal(r) else _string_reader(out)
    if r.name == "boolean":

        def read_bool(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
            values, after = rd.booleans(pos)
            return av.bool_array(values), after

        return read_bool
    source = w.name
    target = {
        "int": np.int32,
        "long": np.int64,
        "float": np.float32,
        "double": np.float64,
    }[r.name]
    scale = 1000 if r.logical in ("timestamp-millis", "local-timestamp-millis") else 1

    def read_number(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        if source == "int":
            values, after = rd.int32(pos, rows)
        elif source == "long":
            values, after = rd.long(pos, rows)
        else:
            values, after = rd.floats(pos, "<f4" if source == "float" else "<f8")
        if scale != 1:
            values = values * scale
        return av.fixed_array(values.astype(target, copy=False), out), after

    return read_number


def _string_reader(out: pa.DataType) -> Read:
    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        starts, lengths, after = rd.spans(pos, rows)
        data, offsets = rd.gather(starts, lengths)
        return av.binary_array(data, offsets, out), after

    return read


def _decimal_bytes(out: pa.DataType) -> Read:
    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        starts, lengths, after = rd.spans(pos, rows)
        wide = lengths > 16
        rd.fail(rows, wide, av.OVERFLOW)
        lengths = np.where(wide, 0, lengths)
        width = 16
        at = starts[:, None] + np.arange(width)[None, :] - (width - lengths)[:, None]
        matrix = rd.buf[np.clip(at, 0, rd.cap + 15)]
        return av.fixed_array(av.decimal_values(matrix, lengths), out), after

    return read


def _fixed(r: Fixed, out: pa.DataType) -> Read:
    size = r.size

    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        matrix, after = rd.fixed_bytes(pos, size)
        if pa.types.is_decimal(out):
            lengths = np.full(len(pos), min(size, 16), np.int64)
            return av.fixed_array(av.decimal_values(matrix[:, -16:], lengths), out), after
        offsets = (np.arange(len(pos) + 1, dtype=np.int64) * size).astype(np.int32)
        return av.binary_array(matrix.reshape(-1), offsets, out), after

    return read


def _enum(w: Enum, r: Enum) -> Read:
    symbols = av.string_array(r.symbols)
    fallback = r.symbols.index(r.default) if r.default in r.symbols else -1
    mapping = np.array(
        [r.symbols.index(s) if s in r.symbols else fallback for s in w.symbols], np.int64
    )

    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        index, after = rd.long(pos, rows)
        wrong = (index < 0) | (index >= len(mapping))
        rd.fail(rows, wrong, av.BAD_ENUM)
        mapped = mapping[np.where(wrong, 0, index)] if len(mapping) else np.zeros_like(index)
        rd.fail(rows, mapped < 0, av.UNKNOWN_SYMBOL)
        return symbols.take(av.indices_array(np.maximum(mapped, 0))), after

    return read


# --- records ----------------------------------------------------------------------------------


def _record(w: Record, r: Record, out: pa.DataType, path: str) -> Read:
    reader_fields = {f.name: i for i, f in enumerate(r.fields)}
    for i, f in enumerate(r.fields):
        for alias in f.aliases:
            reader_fields.setdefault(alias, i)
    steps: list[tuple[int | None, Read]] = []
    written: set[int] = set()
    for wf in w.fields:
        at = reader_fields.get(wf.name)
        if at is None:
            steps.append((None, _compile(wf.type, wf.type, arrow_type_of(wf.type), path)))
            continue
        rf = r.fields[at]
        steps.append((at, _compile(wf.type, rf.type, out.field(at).type, f"{path}.{rf.name}")))
        written.add(at)
    defaults: dict[int, pa.Array] = {}
    for i, rf in enumerate(r.fields):
        if i in written:
            continue
        if not rf.has_default:
            raise SchemaResolutionError(
                f"the reader's field {path}.{rf.name} is not in the writer's schema and has no "
                "default"
            )
        try:
            defaults[i] = constant(rf.type, rf.default, out.field(i).type, f"{path}.{rf.name}")
        except DefaultValueError as exc:
            raise SchemaResolutionError(str(exc)) from None
    fields = list(out)

    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        children: list[pa.Array | None] = [None] * len(fields)
        for i, step in steps:
            values, pos = step(rd, pos, rows)
            if i is not None:
                children[i] = values
        zeros = None
        for i, default in defaults.items():
            if zeros is None:
                zeros = av.indices_array(np.zeros(len(pos), np.int64))
            children[i] = default.take(zeros)
        return pa.StructArray.from_arrays(children, fields=fields), pos

    return read


# --- unions -----------------------------------------------------------------------------------


def _branch_index(rd: Reading, pos: np.ndarray, rows: np.ndarray, count: int) -> Any:
    index, after = rd.long(pos, rows)
    wrong = (index < 0) | (index >= count)
    rd.fail(rows, wrong, av.BAD_BRANCH)
    return np.where(wrong, -1, index), after


def _writer_union(w: Union_, r: AvroType, out: pa.DataType, path: str) -> Read:
    """A writer's union read as a reader type that is not a union: each branch that resolves
    is read as the reader's type; a record on another branch is an error."""
    branches: list[Read | None] = []
    for b in w.branches:
        try:
            branches.append(None if _is_null(b) else _compile(b, r, out, path))
        except SchemaResolutionError:
            branches.append(None)
    if all(b is None for b in branches):
        raise _mismatch(w, r, path)
    return _union_reader(
        branches,
        lambda parts, n: av.scatter(n, [(idx, arr) for idx, arr, _ in parts], out),
        av.UNRESOLVED_BRANCH,
    )


def _union_reader(
    branches: Sequence[Read | None],
    build: Callable[[list[tuple[np.ndarray, pa.Array, int]], int], pa.Array],
    unresolved: int | None,
    nulls: Sequence[bool] = (),
) -> Read:
    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        index, pos = _branch_index(rd, pos, rows, len(branches))
        parts: list[tuple[np.ndarray, pa.Array, int]] = []
        for b, branch in enumerate(branches):
            idx = np.flatnonzero(index == b)
            if not idx.size:
                continue
            if branch is None:
                if unresolved is not None and not (nulls and nulls[b]):
                    rd.fail(rows[idx], np.ones(idx.size, bool), unresolved)
                continue
            if idx.size == len(pos):
                values, pos = branch(rd, pos, rows)
            else:
                values, pos[idx] = branch(rd, pos[idx], rows[idx])
            parts.append((idx, values, b))
        return build(parts, len(pos)), pos

    return read


def _reader_shape(r: Union_) -> tuple[list[AvroType], str]:
    rest = [b for b in r.branches if not _is_null(b)]
    kinds = {b.name for b in rest if isinstance(b, Primitive) and b.logical is None}
    if len(rest) == 1:
        return rest, "single"
    if len(rest) == 2 and kinds in ({"int", "long"}, {"float", "double"}):
        return rest, "promoted"
    return rest, "members"


def _match(w: AvroType, candidates: list[AvroType]) -> int | None:
    """Avro's choice of reader branch for a writer type: the first of the same kind (and
    name), else the first it promotes to."""
    for i, c in enumerate(candidates):
        if type(c) is type(w) and type_name(c) == type_name(w):
            return i
        if isinstance(c, (Record, Enum, Fixed)) and type(c) is type(w):
            assert isinstance(w, (Record, Enum, Fixed))
            if _names_match(w, c):
                return i
    for i, c in enumerate(candidates):
        if isinstance(w, Primitive) and isinstance(c, Primitive):
            if c.name in _PROMOTIONS.get(w.name, ()):
                return i
    return None


def _to_reader_union(w: AvroType, r: Union_, out: pa.DataType, path: str) -> Read:
    rest, shape = _reader_shape(r)
    member_types = [out] if shape != "members" else [f.type for f in out]
    if shape == "promoted":
        member_types = [out, out]
    writer_branches = list(w.branches) if isinstance(w, Union_) else [w]
    branches: list[Read | None] = []
    targets: list[int] = []
    nulls = [_is_null(b) for b in writer_branches]
    for b in writer_branches:
        j = None if _is_null(b) else _match(b, rest)
        if j is None:
            if not _is_null(b) and not isinstance(w, Union_):
                raise _mismatch(w, r, path)
            branches.append(None)
            targets.append(-1)
            continue
        target = rest[j]
        branches.append(_compile(b, target, member_types[j], path))
        targets.append(j)
    if all(b is None for b in branches) and not any(nulls):
        raise _mismatch(w, r, path)

    def build(parts: list[tuple[np.ndarray, pa.Array, int]], n: int) -> pa.Array:
        if shape != "members":
            return av.scatter(n, [(idx, arr) for idx, arr, _ in parts], out)
        by_member: list[list[tuple[np.ndarray, pa.Array]]] = [[] for _ in rest]
        present = np.zeros(n, bool)
        for idx, arr, b in parts:
            by_member[targets[b]].append((idx, arr))
            present[idx] = True
        members = [av.scatter(n, p, member_types[j]) for j, p in enumerate(by_member)]
        return pa.StructArray.from_arrays(
            members, fields=list(out), mask=av.bool_array(~present) if not present.all() else None
        )

    if not isinstance(w, Union_):
        only = branches[0]
        assert only is not None

        def read_one(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
            values, after = only(rd, pos, rows)
            return build([(np.arange(len(pos)), values, 0)], len(pos)), after

        return read_one
    return _union_reader(branches, build, av.UNRESOLVED_BRANCH, nulls)
