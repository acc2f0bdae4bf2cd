"""Replaying channel state into a sink input whose columns changed since the state was written.

Channel state keeps the exact Arrow schema its rows were written with (the header,
:mod:`unaligned.channel_state.format`). A query stopped with state pending may be restarted
with the sink's input columns in another order, with a column added, or with a type changed.
The sink reads its input by position (the Kafka sink found ``key`` and ``value`` by name once,
when the writer was built), so replayed rows must come in the *current* input schema.
:func:`plan_replay` compares the stored schema with the current one, by column name, before
the first row is replayed, and :meth:`ReplayMapping.apply` turns each replayed batch into the
current schema:

- a column is found by its name (exactly, else case-insensitively as Spark resolves names);
  order does not matter;
- a column the state lacks is filled with nulls when the current input allows nulls there;
- a stored column the current input lacks is dropped only when the sink never wrote it
  (``sink_columns``; ``None``: the sink writes every column, as the file sink does);
- a type that changed is converted only without loss: the same type up to nullability and
  nested field names, string <-> binary (binary -> string checks UTF-8 row by row), a wider
  integer or float, a finer timestamp unit or another time zone (the same instants), and
  lists and structs of these;
- a column the current input declares non-nullable gets no null (checked row by row).

Anything else raises :class:`~unaligned.errors.SchemaMismatchError` naming the state, the
barrier, the columns and the way out (:func:`way_out`): the rows are part of the checkpoint and
are never skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import pyarrow as pa

from unaligned.errors import SchemaMismatchError

_STRINGS = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


# --- types ----------------------------------------------------------------------------------------


def convertible(stored: pa.DataType, current: pa.DataType) -> bool:
    """True if every value of ``stored`` has one value of ``current`` it means (see the module
    docstring); binary -> string still fails on a row that is not UTF-8."""
    t = pa.types
    if stored.equals(current):
        return True
    if any(stored.equals(s) for s in _STRINGS) and any(current.equals(s) for s in _STRINGS):
        return True
    if t.is_integer(stored) and t.is_integer(current):
        if t.is_signed_integer(stored) == t.is_signed_integer(current):
            return bool(current.bit_width >= stored.bit_width)
        return bool(t.is_unsigned_integer(stored) and current.bit_width > stored.bit_width)
    if t.is_floating(stored) and t.is_floating(current):
        return bool(current.bit_width >= stored.bit_width)
    if t.is_timestamp(stored) and t.is_timestamp(current):
        units = ("s", "ms", "us", "ns")
        return units.index(current.unit) >= units.index(stored.unit)
    if t.is_date32(stored) and t.is_date64(current):
        return True
    if t.is_decimal(stored) and t.is_decimal(current):
        whole = stored.precision - stored.scale
        return bool(current.scale >= stored.scale and current.precision - current.scale >= whole)
    lists = (t.is_list, t.is_large_list)
    if any(f(stored) for f in lists) and any(f(current) for f in lists):
        return convertible(stored.value_type, current.value_type)
    if t.is_struct(stored) and t.is_struct(current):
        stored_fields = [stored.field(i) for i in range(stored.num_fields)]
        current_fields = [current.field(i) for i in range(current.num_fields)]
        return [f.name for f in stored_fields] == [f.name for f in current_fields] and all(
            convertible(s.type, c.type) for s, c in zip(stored_fields, current_fields, strict=True)
        )
    return False


# --- the plan -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayMapping:
    """How each stored batch becomes a batch of the current input schema (``target``).

    ``sources[i]`` is the stored column of ``target``'s field ``i`` (``None``: nulls);
    ``identity`` when stored and target are the same schema.
    """

    stored: pa.Schema
    target: pa.Schema
    sources: tuple[int | None, ...]
    identity: bool
    where: str

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (in the stored schema) in the target schema; SchemaMismatchError on a value
        the target cannot hold (a null in a non-nullable column, a binary that is not UTF-8)."""
        if self.identity:
            return batch
        arrays = []
        for field, source in zip(self.target, self.sources, strict=True):
            if source is None:
                arrays.append(pa.nulls(batch.num_rows, field.type))
                continue
            column = batch.column(source)
            if not column.type.equals(field.type):
                try:
                    column = column.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaMismatchError(
                        f"{self.where}: column {field.name!r} cannot be replayed as "
                        f"{field.type} (stored as {self.stored.field(source).type}): {exc}. "
                        f"{way_out(self.stored)}"
                    ) from exc
            if not field.nullable and column.null_count:
                raise SchemaMismatchError(
                    f"{self.where}: column {field.name!r} holds nulls in the channel state, but "
                    f"the sink input now declares it non-nullable. {way_out(self.stored)}"
                )
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)


def plan_replay(
    stored: pa.Schema,
    target: pa.Schema,
    *,
    where: str,
    sink_columns: Collection[str] | None = None,
) -> ReplayMapping:
    """Map the stored columns onto ``target`` by name; SchemaMismatchError naming every column
    that cannot be mapped, before any row is replayed.

    ``where`` names the state and its barrier in messages. ``sink_columns`` are the column
    names (case-insensitive) the sink writes out; a stored column outside them may be gone
    from ``target``. ``None``: every column is written (no stored column may be gone).
    """
    if stored.equals(target):
        return ReplayMapping(stored, target, tuple(range(len(target))), True, where)
    needed = None if sink_columns is None else {name.lower() for name in sink_columns}
    problems: list[str] = []
    sources: list[int | None] = []
    used: set[int] = set()
    for field in target:
        index = _find(stored, field.name)
        if index == _AMBIGUOUS:
            problems.append(
                f"column {field.name!r} is ambiguous: the stored rows have several columns of "
                "that name"
            )
            sources.append(None)
            continue
        if index is None:
            if not field.nullable:
                problems.append(
                    f"column {field.name!r} ({field.type}, non-nullable) is new: the stored "
                    "rows have no value for it"
                )
            sources.append(None)
            continue
        used.add(index)
        stored_field = stored.field(index)
        if not convertible(stored_field.type, field.type):
            problems.append(
                f"column {field.name!r} changed type from {stored_field.type} to {field.type}"
            )
        sources.append(index)
    for index, stored_field in enumerate(stored):
        if index in used:
            continue
        if needed is None or stored_field.name.lower() in needed:
            problems.append(
                f"column {stored_field.name!r} ({stored_field.type}) is gone from the sink "
                "input, but the stored rows hold values the sink writes"
            )
    if problems:
        raise SchemaMismatchError(
            f"{where} cannot be replayed into the sink's current input: {'; '.join(problems)}. "
            f"Current input columns: {describe_columns(target)}. {way_out(stored)}"
        )
    return ReplayMapping(stored, target, tuple(sources), False, where)


_AMBIGUOUS = -1


def _find(schema: pa.Schema, name: str) -> int | None:
    """The index of column ``name`` in ``schema``: exact, else case-insensitive; ``None`` if
    absent, ``_AMBIGUOUS`` if several columns match."""
    exact = [i for i, field in enumerate(schema) if field.name == name]
    matches = exact or [i for i, field in enumerate(schema) if field.name.lower() == name.lower()]
    if not matches:
        return None
    return matches[0] if len(matches) == 1 else _AMBIGUOUS


def describe_columns(schema: pa.Schema | Sequence[pa.Field]) -> str:
    """``key binary, value binary not null, ...`` for messages."""
    return ", ".join(
        f"{field.name} {field.type}{'' if field.nullable else ' not null'}" for field in schema
    )


def way_out(stored: pa.Schema) -> str:
    """What a user can do when pending channel state does not fit the changed query."""
    return (
        "The pending rows are part of the checkpoint and are never skipped. Way out: restart "
        "this checkpoint with the previous query, whose sink input columns were "
        f"[{describe_columns(stored)}], until no channel state is pending - e.g. with "
        ".trigger(availableNow=True), which ends only once every pending row is written, and "
        "option checkpointMode=aligned, so that no new state is cut - then start the changed "
        "query on the same checkpoint. (checkpointMode=aligned with the changed columns does "
        "not help: the pending rows are replayed in either mode.)"
    )
