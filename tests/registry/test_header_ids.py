"""Schema ids in record headers: which header counts, and the rows rewritten into the prefix."""

from __future__ import annotations

import pyarrow as pa

from unaligned.registry.connection.registry_settings import RegistryConfig
from unaligned.registry.framing import split_frames
from unaligned.registry.header_ids import header_values, with_header_ids

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NAME = "__value_schema_id"


def test_the_last_header_of_the_name_counts_in_a_slice_too() -> None:
    headers = pa.array(
        [
            [(NAME, b"\x00\x00\x00\x00\x01")],
            None,
            [("other", b"x"), (NAME, b"\x00\x00\x00\x00\x02"), (NAME, b"\x00\x00\x00\x00\x03")],
            [],
            [("__key_schema_id", b"\x00\x00\x00\x00\x04")],
        ],
        type=HEADERS,
    )
    rows, values = header_values(headers, NAME)
    assert rows.tolist() == [0, 2] and values.to_pylist()[1] == b"\x00\x00\x00\x00\x03"
    rows, values = header_values(headers.slice(1), NAME)
    assert rows.tolist() == [1] and values.to_pylist() == [b"\x00\x00\x00\x00\x03"]


def test_header_rows_become_prefixed_with_their_message_indexes() -> None:
    headers = pa.array(
        [None, [(NAME, b"\x00\x00\x00\x00\x07\x02\x02")], [(NAME, b"\x05")], [(NAME, b"")]],
        type=HEADERS,
    )
    values = pa.array([b"\x00\x00\x00\x00\x03abc", b"PAY", b"zz", None], pa.binary())
    config = RegistryConfig(urls=("http://127.0.0.1:9",))
    rewritten, errors = with_header_ids(values, headers, NAME, config)
    assert rewritten.to_pylist() == [
        b"\x00\x00\x00\x00\x03abc",  # no header: the prefix as it was
        b"\x00\x00\x00\x00\x07\x02\x02PAY",  # the id and Protobuf's indexes from the header
        None,
        None,
    ]
    assert [row for row, _ in errors] == [2, 3]
    assert "neither a magic byte 0" in errors[0][1]
    frames = split_frames(rewritten)
    assert frames.schema_ids.tolist()[:2] == [3, 7]
