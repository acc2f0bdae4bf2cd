"""Avro's binary primitives read for many records at once: one numpy operation per field over
every record of a batch, never a Python loop per record.

A :class:`Reading` holds the batch's bytes (padded with zeros, so a read past the last record
stays in the buffer), each record's end (exclusive) and an error code per record. Every read
takes the cursors (``pos``: the next byte of each record being read, one per record or per
array item) with the record each belongs to (``rows``) and returns the values and the advanced
cursors. Malformed input never raises here: a varint longer than 10 bytes, a negative length,
or a length past the record's end marks the record with an error code (:data:`ERRORS`) and
reads on with a length of 0, so the batch finishes and the caller decides (``mode``). Arrow
arrays are built over numpy buffers (:mod:`unaligned._util.arrow`: no ``pa.array``, which imports
pandas in the read task).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

#: Spans up to this many bytes are gathered through a sliding window (:meth:`Reading.gather`).
_WINDOW = 48
#: Zero bytes after the data: at least the widest window, so a window at any valid start
#: (a span ending at or before the data's end) is whole.
_PAD = 64
#: Error codes per record (0: none) and what they mean in the error column.
ERRORS: tuple[str, ...] = (
    "",
    "a varint is longer than 10 bytes",
    "a length is negative or runs past the end of the record",
    "the record ends before its last field",
    "a union branch index is out of range",
    "an enum index is out of range",
    "an enum symbol is not in the reader's enum and it has no default",
    "a value does not fit the reader's type",
    "a union branch cannot be read as the reader's type",
    "",  # MESSAGE: the text is in Reading.notes
)
VARINT_TOO_LONG, BAD_LENGTH, TRUNCATED, BAD_BRANCH, BAD_ENUM, UNKNOWN_SYMBOL, OVERFLOW = range(1, 8)
UNRESOLVED_BRANCH = 8
MESSAGE = 9


class Reading:
    """The bytes of a batch's records and their error codes (module docstring)."""

    def __init__(self, data: np.ndarray, ends: np.ndarray) -> None:
        self.buf = np.concatenate([data, np.zeros(_PAD, np.uint8)])
        self.cap = len(data) + 1  # one past the end: a read past the last record shows
        self.ends = ends.astype(np.int64, copy=False)
        self.errors = np.zeros(len(ends), np.uint8)
        self.notes: dict[int, str] = {}

    def fail(self, rows: np.ndarray, mask: np.ndarray, code: int) -> None:
        """Mark the records of ``rows[mask]`` with ``code`` (the first error of a record stays)."""
        if mask.any():
            hit = rows[mask]
            self.errors[hit] = np.where(self.errors[hit] == 0, code, self.errors[hit])

    def fail_with(self, rows: np.ndarray, message: str) -> None:
        """Mark the records ``rows`` with ``message`` (a reason no code names)."""
        for row in rows[self.errors[rows] == 0].tolist():
            self.notes[row] = message
        self.errors[rows] = np.where(self.errors[rows] == 0, MESSAGE, self.errors[rows])

    def reason(self, row: int) -> str:
        """Why record ``row`` did not decode."""
        code = int(self.errors[row])
        return self.notes.get(row, "") if code == MESSAGE else ERRORS[code]

    def clamp(self, pos: np.ndarray) -> np.ndarray:
        clamped: np.ndarray = np.minimum(pos, self.cap, out=pos)
        return clamped

    # --- numbers ----------------------------------------------------------------------------

    def varint(self, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw (not zigzag-decoded) varints at ``pos`` as uint64, and the cursors after them.

        Every cursor takes one step per byte while most still continue (whole-array
        operations), then only those that continue (a varint is 1-10 bytes)."""
        byte = self.buf[pos]
        value = (byte & 0x7F).astype(np.uint64)
        cont = byte >= 0x80
        after = pos + 1
        shift = 7
        while True:
            left = np.count_nonzero(cont)
            if left == 0:
                return value, self.clamp(after)
            if left < len(pos) // 4 or shift > 63:
                break
            byte = self.buf[after]
            more = byte >= 0x80
            byte &= 0x7F
            byte *= cont  # bytes of varints that ended add nothing
            value |= np.left_shift(byte, np.uint64(shift), dtype=np.uint64)
            after += cont
            cont &= more
            shift += 7
        more = np.flatnonzero(cont)
        while more.size:
            if shift > 63:
                self.fail(rows, cont & np.isin(np.arange(len(pos)), more), VARINT_TOO_LONG)
                break
            at = np.minimum(after[more], self.cap)
            byte = self.buf[at]
            value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
            after[more] = at + 1
            more = more[byte >= 0x80]
            shift += 7
        return value, self.clamp(after)

    def long(self, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Avro ``long`` (zigzag varint) values as int64."""
        raw, after = self.varint(pos, rows)
        half = (raw >> np.uint64(1)).view(np.int64)
        return half ^ -(raw & np.uint64(1)).view(np.int64), after

    def int32(self, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Avro ``int`` values as int32 (a value outside int32 marks the record)."""
        values, after = self.long(pos, rows)
        self.fail(rows, (values < -(2**31)) | (values >= 2**31), OVERFLOW)
        return values.astype(np.int32), after

    def fixed_bytes(self, pos: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """``width`` bytes at each cursor as an (n, width) uint8 matrix."""
        window = np.lib.stride_tricks.sliding_window_view(self.buf, width)
        return window[np.minimum(pos, len(window) - 1)], self.clamp(pos + width)

    def floats(self, pos: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
        width = np.dtype(dtype).itemsize
        matrix, after = self.fixed_bytes(pos, width)
        return np.ascontiguousarray(matrix).view(dtype).reshape(-1), after

    def booleans(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.buf[pos] != 0, self.clamp(pos + 1)

    # --- bytes and strings ------------------------------------------------------------------

    def spans(self, pos: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Length-prefixed bytes at each cursor: (starts, lengths, cursors after them)."""
        lengths, starts = self.long(pos, rows)
        wrong = (lengths < 0) | (lengths > self.ends[rows] - starts)
        if wrong.any():
            self.fail(rows, wrong, BAD_LENGTH)
            lengths = np.where(wrong, 0, lengths)
        return starts, lengths, self.clamp(starts + lengths)

    def gather(self, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes of each span concatenated, and their int32 Arrow offsets. Short spans
        (all at most :data:`_WINDOW` bytes) are cut from a fixed-width window per span with one
        boolean mask; longer ones take one index per byte (:func:`spans_index`)."""
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        widest = int(lengths.max()) if len(lengths) else 0
        if 0 < widest <= _WINDOW:
            window = np.lib.stride_tricks.sliding_window_view(self.buf, widest)
            rows = window[np.minimum(starts, len(window) - 1)]
            keep = np.arange(widest, dtype=np.int16)[None, :] < lengths.astype(np.int16)[:, None]
            data = rows.ravel()[keep.ravel()]
        else:
            data = self.buf[spans_index(starts, lengths)]
        return data, offsets.astype(np.int32)


def spans_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every position of every span ``[start, start + length)``, span after span: one index
    per byte, the span's start then +1 per byte (a cumulative sum of steps)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    nonempty = lengths > 0
    step = np.ones(total, np.int64)
    firsts = offsets[:-1][nonempty]
    begin, size = starts[nonempty], lengths[nonempty]
    step[firsts] = begin
    step[firsts[1:]] -= begin[:-1] + size[:-1] - 1
    return np.cumsum(step)


def binary_array(
    data: np.ndarray, offsets: np.ndarray, arrow_type: pa.DataType, valid: np.ndarray | None = None
) -> pa.Array:
    """A binary or string array over ``data`` and int32 ``offsets`` (no UTF-8 check: Spark
    keeps Avro strings as the bytes they are)."""
    return pa.Array.from_buffers(
        arrow_type,
        len(offsets) - 1,
        [validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
    )


def validity(valid: np.ndarray | None) -> pa.Buffer | None:
    """An Arrow validity bitmap for ``valid`` (``None``: every row valid)."""
    if valid is None or bool(valid.all()):
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def fixed_array(
    values: np.ndarray, arrow_type: pa.DataType, valid: np.ndarray | None = None
) -> pa.Array:
    """A fixed-width array (numbers, dates, timestamps, decimals) over numpy ``values``."""
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(values), [validity(valid), pa.py_buffer(data)])


def bool_array(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    bits = np.packbits(values.astype(bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [validity(valid), pa.py_buffer(bits)])


def string_array(texts: list[str] | tuple[str, ...]) -> pa.Array:
    """A small string array (enum symbols, error messages) without ``pa.array``."""
    raw = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    data = np.frombuffer(b"".join(raw) or b"\0", np.uint8)
    return binary_array(data, offsets, pa.string())


def indices_array(indices: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """Row numbers for ``take`` (a null index takes a null)."""
    return fixed_array(indices.astype(np.int64), pa.int64(), valid)


def scatter(n: int, parts: Sequence[tuple[np.ndarray, pa.Array]], out: pa.DataType) -> pa.Array:
    """A length-``n`` array of type ``out`` with ``array[j]`` at row ``rows[j]`` for each
    ``(rows, array)`` of ``parts``, null elsewhere."""
    parts = [(rows, arr) for rows, arr in parts if len(rows)]
    if len(parts) == 1 and len(parts[0][0]) == n:
        return parts[0][1]
    if not parts:
        return pa.nulls(n, out)
    index = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    base = 0
    for rows, _ in parts:
        index[rows] = np.arange(base, base + len(rows))
        valid[rows] = True
        base += len(rows)
    combined = parts[0][1] if len(parts) == 1 else pa.concat_arrays([a for _, a in parts])
    return combined.take(indices_array(index, valid))


def decimal_values(matrix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Big-endian two's complement integers of at most 16 bytes (right-aligned in ``matrix``,
    one row each, ``lengths`` bytes significant) as Arrow decimal128 little-endian bytes."""
    n, width = matrix.shape
    out = np.zeros((n, 16), np.uint8)
    little = matrix[:, ::-1]  # least significant byte first
    used = np.arange(width)[None, :] < lengths[:, None]
    take = min(width, 16)
    out[:, :take] = np.where(used, little, 0)[:, :take]
    negative = (lengths > 0) & (
        matrix[np.arange(n), np.clip(width - lengths, 0, width - 1)] >= 0x80
    )
    fill = (np.arange(16)[None, :] >= lengths[:, None]) & negative[:, None]
    out[fill] = 0xFF
    return out


def checked_array(
    values: list[object], arrow_type: pa.DataType, reading: Reading, rows: np.ndarray
) -> pa.Array:
    """``pa.array(values, arrow_type)`` for decoders that build Python values row by row; a
    value Arrow refuses (out of range, wrong kind) fails only its row (``rows[i]``), with
    Arrow's reason, and is null."""
    try:
        return pa.array(values, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass
    for i, value in enumerate(values):
        if value is None:
            continue
        try:
            pa.array([value], arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            reading.fail_with(rows[i : i + 1], f"a value does not fit its column's type: {exc}")
            values[i] = None
    return pa.array(values, arrow_type)
