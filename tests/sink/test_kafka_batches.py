"""kafka_batches' pure parts: the payload bytes it counts and the headers it refuses. Writing to
a broker: integration/test_kafka_sink_fast_path.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from unaligned.errors import SchemaMismatchError
from unaligned.sink.kafka_batches import _checked_headers, payload_sizes

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_payload_sizes_count_key_value_and_header_bytes_like_the_per_record_path() -> None:
    keys = pa.array([b"key", None, "é".encode()], pa.binary())
    values = pa.array(["x" * 100, None, "yz"])
    headers = pa.array([[("hd", b"12345")], None, [("a", b""), ("é", b"1")]], _HEADERS)
    sizes = payload_sizes(keys, values, headers, 3)
    assert sizes.tolist() == [3 + 100 + 2 + 5, 0, 2 + 2 + 1 + 0 + 2 + 1]
    assert payload_sizes(None, values, None, 3).tolist() == [100, 0, 2]


def test_a_null_header_key_or_value_is_refused() -> None:
    for bad in ([("k", None)], [(None, b"v")]):
        with pytest.raises(SchemaMismatchError, match="null header key or value"):
            _checked_headers(pa.array([[("ok", b"1")], bad], _HEADERS))
    fine = pa.array([None, [], [("k", b"")]], _HEADERS)
    assert _checked_headers(fine) is fine
