"""Confluent framing read and written column-wise."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from unaligned.registry.framing import frame_payloads, message_indexes, split_frames


def test_frames_round_trip_with_prefixes_and_nulls() -> None:
    payloads = pa.array([b"abc", None, b"", b"xyz1"], pa.binary())
    prefixes = pa.array([b"\x00", b"", b"\x02\x04", b""], pa.binary())
    framed = frame_payloads(np.array([7, 0, 300, 2**31 - 1]), payloads, prefixes)
    assert framed.to_pylist() == [
        b"\x00\x00\x00\x00\x07\x00abc",
        None,
        b"\x00\x00\x00\x01\x2c\x02\x04",
        b"\x00\x7f\xff\xff\xffxyz1",
    ]
    frames = split_frames(framed)
    assert frames.present.tolist() == [True, False, True, True]
    assert frames.framed.tolist() == [True, False, True, True]
    assert frames.schema_ids.tolist() == [7, 0, 300, 2**31 - 1]


def test_rows_without_the_magic_byte_or_too_short_are_not_framed() -> None:
    values = pa.array([b"\x01\x00\x00\x00\x01x", b"\x00\x00\x00", b"\x00\x00\x00\x00\x05"])
    frames = split_frames(values.slice(0))
    assert frames.framed.tolist() == [False, False, True]
    assert frames.starts[2] == frames.ends[2]  # an empty payload


def test_sliced_arrays_read_their_own_rows() -> None:
    framed = frame_payloads(np.array([1, 2, 3]), pa.array([b"a", b"bb", b"ccc"]))
    frames = split_frames(framed.slice(1))
    assert frames.schema_ids.tolist() == [2, 3]
    assert [
        frames.data[s:e].tobytes() for s, e in zip(frames.starts, frames.ends, strict=True)
    ] == [
        b"bb",
        b"ccc",
    ]


def test_protobuf_message_indexes() -> None:
    # [0] as the single byte 0; [1, 0] as count 2 (zigzag 4), 1 (2), 0 (0); garbage count
    payloads = pa.array([b"\x00m", b"\x04\x02\x00m", b"\x7fm"])
    frames = split_frames(frame_payloads(np.array([1, 1, 1]), payloads))
    paths, starts, bad = message_indexes(frames, np.arange(3))
    assert paths[:2] == [(0,), (1, 0)]
    assert bad.tolist() == [False, False, True]
    assert frames.data[starts[0]] == ord("m") and frames.data[starts[1]] == ord("m")
