"""Avro arrays and maps read across records: blocks of items, item position by item position.

An array or map is a series of blocks (a count, a negative count with the block's byte size
after it, then the items; a count of 0 ends it). :func:`blocks` reads round ``k`` of a block as
item ``k`` of every record that has one (one numpy read per round over those records), then
puts the items back in record order with one ``take``. A count that the record's remaining
bytes cannot hold (:func:`min_bytes` per item) marks the record instead of looping on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from unaligned.registry.avro import vectors as av
from unaligned.registry.avro.schema import AvroType, Fixed, Primitive, Record
from unaligned.registry.avro.vectors import Reading

Read = Callable[[Reading, np.ndarray, np.ndarray], tuple[pa.Array, np.ndarray]]
"""A compiled reader: (the reading, cursors, their records) -> (values, cursors after them)."""


#: Items per block for a type whose items take no bytes (null, an empty record): more is
#: taken as a corrupt count.
_MAX_EMPTY_ITEMS = 1 << 24


def min_bytes(t: AvroType, seen: frozenset[str] = frozenset()) -> int:
    """The fewest bytes a value of ``t`` takes (0: null, an empty record)."""
    if isinstance(t, Primitive):
        return 0 if t.name == "null" else 1
    if isinstance(t, Fixed):
        return t.size
    if isinstance(t, Record):
        if t.name in seen:
            return 1
        return sum(min_bytes(f.type, seen | {t.name}) for f in t.fields)
    return 1  # enum index, union branch index, block count


def blocks(items: Read, keys: Read | None, out: pa.DataType, min_bytes: int) -> Read:
    """An array (``keys`` None) or map: blocks of items, read round by round across records.
    ``min_bytes``: the fewest bytes an item takes, which bounds a sane block count."""

    def read(rd: Reading, pos: np.ndarray, rows: np.ndarray) -> tuple[pa.Array, Any]:
        n = len(pos)
        counts = np.zeros(n, np.int64)
        lanes: list[np.ndarray] = []
        slots: list[np.ndarray] = []
        key_parts: list[pa.Array] = []
        value_parts: list[pa.Array] = []
        active = np.arange(n)
        while active.size:
            count, after = rd.long(pos[active], rows[active])
            negative = count < 0
            if negative.any():  # a block with its byte size: skip the size
                count = np.abs(count)
                _, after[negative] = rd.long(after[negative], rows[active][negative])
            pos[active] = after
            room = np.maximum(rd.ends[rows[active]] - after, 0)
            if min_bytes:
                wrong = count * min_bytes > room
            else:
                wrong = count > _MAX_EMPTY_ITEMS
            rd.fail(rows[active], wrong, av.BAD_LENGTH)
            count = np.where(wrong, 0, count)
            has = count > 0
            active, count = active[has], count[has]
            for k in range(int(count.max()) if count.size else 0):
                lane = active[count > k]
                if keys is not None:
                    key_values, pos[lane] = keys(rd, pos[lane], rows[lane])
                    key_parts.append(key_values)
                values, pos[lane] = items(rd, pos[lane], rows[lane])
                value_parts.append(values)
                lanes.append(lane)
                slots.append(counts[lane] + k)
            counts[active] += count
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        offsets_array = av.fixed_array(offsets.astype(np.int32), pa.int32())
        value_type = out.item_type if keys is not None else out.value_type
        values = _in_order(value_parts, lanes, slots, offsets, value_type)
        if keys is None:
            return pa.ListArray.from_arrays(offsets_array, values, type=out), pos
        key_array = _in_order(key_parts, lanes, slots, offsets, pa.string())
        return pa.MapArray.from_arrays(offsets_array, key_array, values, type=out), pos

    return read


def _in_order(
    parts: list[pa.Array],
    lanes: list[np.ndarray],
    slots: list[np.ndarray],
    offsets: np.ndarray,
    out: pa.DataType,
) -> pa.Array:
    """Items read round by round, put in record order (each record's items in its order)."""
    if not parts:
        return pa.nulls(0, out)
    combined = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    dest = np.concatenate([offsets[lane] + slot for lane, slot in zip(lanes, slots, strict=True)])
    order = np.argsort(dest, kind="stable")
    if np.array_equal(order, np.arange(len(order))):
        return combined
    return combined.take(av.indices_array(order))
