"""Confluent's wire framing, read and written for a whole Arrow column at once.

A framed record is a magic byte ``0``, the writer's schema id as a 4-byte big-endian integer,
then the encoded record; Protobuf puts the message indexes (which message of the schema, a
varint count then varint indexes, zigzag-encoded; a single ``0`` for the first message) between
the id and the message. :func:`split_frames` reads the headers of every row of a binary column
with numpy; :func:`frame_payloads` writes them in front of encoded payloads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from unaligned._util.arrow import valid_rows
from unaligned.registry.avro import vectors as av

MAGIC = 0
HEADER_BYTES = 5


@dataclass(frozen=True)
class Frames:
    """A binary column's rows split into header and payload (``present``: not null;
    ``framed``: present and long enough with the magic byte; ``schema_ids`` is 0 elsewhere).
    ``starts``/``ends`` index ``data`` (payload starts after the header, ends exclusive)."""

    data: np.ndarray
    present: np.ndarray
    framed: np.ndarray
    schema_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.present)


def binary_parts(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data bytes, each row's start, each row's end) of a binary or string array, no copy:
    the array's own bytes only (a slice's, not its parent's), rows' offsets from 0."""
    if pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type):
        dtype: type[np.generic] = np.int64
    else:
        dtype = np.int32
    n = len(values)
    buffers = values.buffers()
    offsets = (
        np.zeros(n + 1, np.int64)
        if buffers[1] is None
        else np.frombuffer(buffers[1], dtype, n + 1, values.offset * np.dtype(dtype).itemsize)
    )
    data = np.zeros(0, np.uint8) if buffers[2] is None else np.frombuffer(buffers[2], np.uint8)
    offsets = offsets.astype(np.int64)
    if n and offsets[0]:  # a slice: only its own bytes (no copy), offsets from 0
        data = data[offsets[0] : offsets[-1]]
        offsets -= offsets[0]
    elif n:
        data = data[: offsets[-1]]
    return data, offsets[:-1], offsets[1:]


def split_frames(values: pa.Array) -> Frames:
    """Read the header of every row of ``values`` (binary)."""
    data, starts, ends = binary_parts(values)
    present = valid_rows(values)
    long_enough = (ends - starts) >= HEADER_BYTES
    if len(data) < HEADER_BYTES:  # no row can hold a header
        data = np.concatenate([data, np.zeros(HEADER_BYTES, np.uint8)])
    window = np.lib.stride_tricks.sliding_window_view(data, HEADER_BYTES)
    head = window[np.where(long_enough, np.minimum(starts, len(window) - 1), 0)]
    framed = present & long_enough & (head[:, 0] == MAGIC)
    big_endian = head[:, 1:].copy().view(">u4").reshape(-1)
    ids = big_endian.astype(np.int64)
    ids = np.where(framed, ids, 0)
    return Frames(data, present, framed, ids, np.where(framed, starts + HEADER_BYTES, ends), ends)


def message_indexes(
    frames: Frames, rows: np.ndarray
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """Protobuf's message indexes of ``rows``: each row's index path (``(0,)`` for the first
    message), the message's start and a flag per row whose indexes do not decode."""
    reading = av.Reading(frames.data, frames.ends)
    pos = frames.starts[rows].astype(np.int64)
    count, pos = reading.long(pos, rows)
    bad = (count < 0) | (count > 100)
    count = np.where(bad, 0, count)
    paths = np.zeros((len(rows), int(count.max()) if count.size else 0), np.int64)
    for k in range(paths.shape[1]):
        lane = np.flatnonzero(count > k)
        paths[lane, k], pos[lane] = reading.long(pos[lane], rows[lane])
    bad |= reading.errors[rows] != 0
    bad |= pos > frames.ends[rows]
    shaped = [
        tuple(p[:c]) if c else (0,) for p, c in zip(paths.tolist(), count.tolist(), strict=True)
    ]
    return shaped, pos, bad


def frame_payloads(
    schema_ids: np.ndarray, payloads: pa.Array, prefixes: pa.Array | None = None
) -> pa.Array:
    """``magic + id + [prefix] + payload`` for every row (a null payload stays null):
    ``schema_ids`` per row, ``prefixes`` (binary, e.g. Protobuf's message indexes) per row."""
    n = len(payloads)
    present = valid_rows(payloads)
    parts = [] if prefixes is None else [binary_parts(prefixes)]
    parts.append(binary_parts(payloads))
    spans = [np.where(present, ends - starts, 0) for _, starts, ends in parts]
    lengths = np.where(present, HEADER_BYTES, 0) + np.sum(spans, axis=0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    rows = np.flatnonzero(present)
    base = offsets[:-1][rows]
    ids = schema_ids[rows].astype(np.int64)
    for k in range(4):  # out[base] stays 0: the magic byte
        out[base + 1 + k] = (ids >> (8 * (3 - k))) & 0xFF
    cursor = base + HEADER_BYTES
    for (data, starts, _), span in zip(parts, spans, strict=True):
        length = span[rows]
        out[av.spans_index(cursor, length)] = data[av.spans_index(starts[rows], length)]
        cursor = cursor + length
    return av.binary_array(out, offsets.astype(np.int32), pa.binary(), present)
