"""kafka_batches' pure part: the headers it refuses. The payload bytes it counts are the
encoder's (tests/kafka/records/test_record_encoder.py); writing to a broker:
integration/test_kafka_sink_fast_path.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from unaligned.errors import SchemaMismatchError
from unaligned.sink.topics.kafka_batches import _checked_headers

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_a_null_header_key_or_value_is_refused() -> None:
    for bad in ([("k", None)], [(None, b"v")]):
        with pytest.raises(SchemaMismatchError, match="null header key or value"):
            _checked_headers(pa.array([[("ok", b"1")], bad], _HEADERS))
    fine = pa.array([None, [], [("k", b"")]], _HEADERS)
    assert _checked_headers(fine) is fine
