"""Arrow arrays over numpy memory, built without ``pa.array``.

``pa.array`` (and ``pa.scalar``) import pandas the first time they run in a process, whatever
they convert: pyarrow checks whether the value is a pandas object. That is about half a second
in every Spark Python worker that reads or writes a batch, for a library none of them uses.
:func:`numeric_array` wraps a numpy array's buffer instead (no copy when it is already
contiguous and of the right dtype).
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
