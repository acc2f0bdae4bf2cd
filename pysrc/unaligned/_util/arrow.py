"""Arrow arrays and numpy arrays over each other's memory, without pyarrow's converters.

``pa.array``, ``pa.scalar`` and ``Array.to_numpy`` import pandas the first time they run in a
process, whatever they convert: pyarrow checks whether the value is a pandas object. That is
about half a second in every Spark Python worker that reads or writes a batch, for a library
none of them uses. :func:`numeric_array` wraps a numpy array's buffer in an Arrow array,
:func:`integers` and :func:`valid_rows` read an Arrow array's buffers as numpy (no copy where
the layouts agree).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def numeric_array(values: np.ndarray, arrow_type: pa.DataType, dtype: type[np.generic]) -> pa.Array:
    """``values`` as an Arrow array of ``arrow_type`` (fixed width, no nulls) over numpy memory
    of ``dtype`` (the numpy type of the same width, e.g. ``np.int64`` for ``pa.timestamp``)."""
    data = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])


def row_indices(rows: np.ndarray) -> pa.Array:
    """Row numbers as an ``int64`` Arrow array, for ``take``."""
    return numeric_array(rows, pa.int64(), np.int64)


def integers(arr: pa.Array) -> np.ndarray:
    """The values of an integer array as numpy over its data buffer (no copy); a null row's
    slot holds whatever the buffer has there: mask it with :func:`valid_rows`."""
    kind = arr.type
    if not pa.types.is_integer(kind):
        raise TypeError(f"not an integer array: {kind}")
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    data = arr.buffers()[1]
    if data is None:  # an empty array may come without a data buffer
        return np.zeros(len(arr), dtype)
    return np.frombuffer(data, dtype, len(arr), arr.offset * dtype.itemsize)


def valid_rows(arr: pa.Array) -> np.ndarray:
    """True for each row of ``arr`` that is not null (from its validity bitmap)."""
    rows = len(arr)
    if arr.null_count == 0:
        return np.ones(rows, bool)
    if arr.null_count == rows and arr.buffers()[0] is None:  # a null-typed array
        return np.zeros(rows, bool)
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + rows].astype(bool)
