"""_arrow: numpy <-> Arrow over shared buffers, equal to pyarrow's own conversions (sliced
arrays, nulls, unsigned and empty ones included)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from unaligned._util.arrow import integers, numeric_array, row_indices, valid_rows


def test_numeric_array_equals_pa_array() -> None:
    values = np.arange(-3, 5, dtype=np.int64)
    assert numeric_array(values, pa.int64(), np.int64).equals(pa.array(values))
    as_int32 = numeric_array(values[::2], pa.int32(), np.int32)  # strided: copied contiguous
    assert as_int32.to_pylist() == [-3, -1, 1, 3]
    stamps = numeric_array(np.array([1_000_000]), pa.timestamp("us", tz="UTC"), np.int64)
    assert stamps.cast(pa.int64()).to_pylist() == [1_000_000]
    assert row_indices(np.array([2, 0], np.int64)).equals(pa.array([2, 0], pa.int64()))


@pytest.mark.parametrize("kind", [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.uint64()])
def test_integers_and_valid_rows_equal_pyarrow_on_slices_with_nulls(kind: pa.DataType) -> None:
    full = pa.array([5, None, 7, 0, None, 3, 1, None, 2, 9, 4], kind)
    for piece in (full, full.slice(1), full.slice(3, 6), full.slice(9), full.slice(5, 0)):
        valid = valid_rows(piece)
        assert valid.tolist() == piece.is_valid().to_pylist()
        assert integers(piece)[valid].tolist() == piece.drop_null().to_pylist()


def test_without_nulls_and_refusals() -> None:
    dense = pa.array([1, 2, 3], pa.int32()).slice(1)
    assert valid_rows(dense).tolist() == [True, True]
    assert integers(dense).tolist() == [2, 3]
    assert valid_rows(pa.nulls(3)).tolist() == [False, False, False]
    with pytest.raises(TypeError, match="not an integer array"):
        integers(pa.array([1.5]))
