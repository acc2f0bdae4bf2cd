"""Channel state refs: carry-forward, JSON, and replay of a ref that no longer matches its bytes."""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from channel_state_rows import KAFKA_SCHEMA, kafka_batch, kafka_rows, rows_of, write_state
from unaligned.channel_state.format import META_BARRIER_ID, META_SCHEMA_VERSION
from unaligned.channel_state.reader import read_channel_state
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState, InlineChannelState
from unaligned.errors import ChannelStateError

# --- replay order and carry-forward ---------------------------------------------------------------


@pytest.mark.parametrize("threshold", [0, 10_000_000], ids=["file", "inline"])
def test_replay_part_then_carry_forward_by_reference(tmp_path: Path, threshold: int) -> None:
    batches = [kafka_batch(250, start=i * 250) for i in range(4)]
    ref = write_state(tmp_path, batches, inline_threshold_bytes=threshold, block_bytes=4096)
    original = kafka_rows(1000)

    # first replay: takes three batches of 64 but only 150 rows reach the external system
    replay = read_channel_state(ref, batch_rows=64)
    taken = [next(replay) for _ in range(3)]
    replay.close()
    written = rows_of(taken)[:150]
    carried = ChannelStateRef.from_json(ref.advanced(150).to_json())
    assert (carried.start_row, carried.remaining_rows) == (150, 850)
    assert carried.barrier_id == 7 and type(carried) is type(ref)
    if isinstance(ref, FileChannelState):
        assert carried.path == ref.path  # the same file, not rewritten

    # second replay times out again after 333 more rows
    second = rows_of(read_channel_state(carried, batch_rows=100))[:333]
    carried_again = carried.advanced(333)
    assert carried_again.start_row == 483

    rest = rows_of(read_channel_state(carried_again, batch_rows=1000))
    assert written + second + rest == original
    assert carried_again.advanced(len(rest)).exhausted


def test_replay_from_every_start_row_near_block_boundaries(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(120)], inline_threshold_bytes=0, block_bytes=1024)
    original = kafka_rows(120)
    for start in range(0, 121, 7):
        assert rows_of(read_channel_state(ref.advanced(start), batch_rows=13)) == original[start:]
    assert list(read_channel_state(ref.advanced(120), batch_rows=5)) == []


def test_advance_beyond_the_rows_is_refused(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(10)])
    with pytest.raises(ValueError, match="cannot advance by 11 rows, 10 remain"):
        ref.advanced(11)
    with pytest.raises(ValueError, match="cannot advance by 6 rows, 5 remain"):
        ref.advanced(5).advanced(6)
    with pytest.raises(ValueError, match="batch_rows"):
        read_channel_state(ref, batch_rows=0)


def test_ref_json_round_trip(tmp_path: Path) -> None:
    inline = write_state(tmp_path, [kafka_batch(3)])
    file_ref = write_state(tmp_path, [kafka_batch(3)], inline_threshold_bytes=0)
    for ref in (inline, file_ref, file_ref.advanced(2)):
        assert ChannelStateRef.from_json(ref.to_json()) == ref
    assert inline.to_dict()["kind"] == "inline" and file_ref.to_dict()["kind"] == "file"


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1]",
        '{"kind": "tape", "barrier_id": 4}',
        '{"kind": "file", "barrier_id": 4}',
    ],
)
def test_malformed_ref_json(text: str) -> None:
    with pytest.raises(ChannelStateError, match="channel state reference"):
        ChannelStateRef.from_json(text)


def test_malformed_ref_names_the_barrier(tmp_path: Path) -> None:
    data = write_state(tmp_path, [kafka_batch(3)]).to_dict()
    data["inline_avro"] = "@@not base64@@"
    with pytest.raises(ChannelStateError, match="for barrier 7"):
        ChannelStateRef.from_dict(data)
    data = write_state(tmp_path, [kafka_batch(3)]).to_dict() | {"start_row": 9}
    with pytest.raises(ChannelStateError, match="start_row 9 outside 0..3"):
        ChannelStateRef.from_dict(data)


# --- corruption -----------------------------------------------------------------------------------


def rewrite_header(ref: FileChannelState, **changes: str) -> FileChannelState:
    """Rewrite the file with changed header metadata; returns a ref with the new size."""
    with open(ref.path, "rb") as f:
        avro = fastavro.reader(f)
        metadata = {k: v for k, v in avro.metadata.items() if not k.startswith("avro.")}
        records = list(avro)
        schema = avro.writer_schema
    metadata.update(changes)
    with open(ref.path, "wb") as f:
        fastavro.writer(f, schema, records, metadata=metadata)
    return lying_ref(ref, Path(ref.path).read_bytes())


def lying_ref(ref, data: bytes):
    """``ref`` with size and CRC-32 of ``data``: a ref that does not notice the damage."""
    return dataclasses.replace(ref, byte_size=len(data), crc32=zlib.crc32(data))


NAME = r"task-3\.attempt-42\.\w+\.avro"
"""A finished file's name (task 3, attempt 42, any write id)."""


@pytest.fixture
def file_ref(tmp_path: Path) -> FileChannelState:
    batches = [kafka_batch(100, start=i * 100) for i in range(5)]
    ref = write_state(tmp_path, batches, inline_threshold_bytes=0, block_bytes=4096)
    assert isinstance(ref, FileChannelState)
    return ref


def test_truncated_file(file_ref: FileChannelState) -> None:
    data = Path(file_ref.path).read_bytes()
    Path(file_ref.path).write_bytes(data[: len(data) // 2])
    with pytest.raises(ChannelStateError, match=rf"{NAME} \(barrier 7, task 3\) is trunc"):
        read_channel_state(file_ref, batch_rows=50)


def test_truncated_at_a_block_boundary_is_caught_by_the_row_count(
    file_ref: FileChannelState,
) -> None:
    path = Path(file_ref.path)
    data = path.read_bytes()
    sync = data[-16:]  # every block ends with the file's sync marker, and so does the header
    end_of_header = data.index(sync) + 16
    cut = data.index(sync, end_of_header) + 16  # end of the first data block
    assert cut < len(data)
    path.write_bytes(data[:cut])
    ref = lying_ref(file_ref, data[:cut])
    with pytest.raises(ChannelStateError, match=r"is truncated: \d+ rows, expected 500"):
        rows_of(read_channel_state(ref, batch_rows=1000))


def test_corrupt_block(file_ref: FileChannelState) -> None:
    path = Path(file_ref.path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    # the null codec has no checksum of its own: the ref's CRC-32 catches it before any row
    with pytest.raises(ChannelStateError, match=r"\(barrier 7, task 3\) is corrupt: CRC-32"):
        read_channel_state(file_ref, batch_rows=1000)


def test_missing_file(file_ref: FileChannelState) -> None:
    Path(file_ref.path).unlink()
    with pytest.raises(ChannelStateError, match=rf"{NAME} \(barrier 7, task 3\) is missing"):
        read_channel_state(file_ref, batch_rows=10)


def test_wrong_schema_version(file_ref: FileChannelState) -> None:
    ref = rewrite_header(file_ref, **{META_SCHEMA_VERSION: "2"})
    with pytest.raises(ChannelStateError, match=r"barrier 7.*schema version is '2', expected 1"):
        read_channel_state(ref, batch_rows=10)


def test_wrong_barrier_in_header(file_ref: FileChannelState) -> None:
    ref = rewrite_header(file_ref, **{META_BARRIER_ID: "6"})
    with pytest.raises(ChannelStateError, match=r"barrier 7.*barrier id is '6', expected 7"):
        read_channel_state(ref, batch_rows=10)
    # a ref that names another barrier or task than the file holds
    good = rewrite_header(file_ref, **{META_BARRIER_ID: "7"})
    with pytest.raises(ChannelStateError, match=r"barrier 8.*barrier id is '7', expected 8"):
        read_channel_state(dataclasses.replace(good, barrier_id=8), batch_rows=10)
    with pytest.raises(ChannelStateError, match=r"task 4\).*task index is '3', expected 4"):
        read_channel_state(dataclasses.replace(good, task_index=4), batch_rows=10)


def test_a_later_attempt_never_replaces_the_committed_attempts_file(tmp_path: Path) -> None:
    """Issue 8.1: two attempts of one task at one barrier (a retry, a speculative copy, a
    zombie of a failed stage or of an earlier run with the same taskAttemptId) each finish
    their own file; the ref the commit record holds still replays the rows its attempt wrote."""
    committed = write_state(tmp_path, [kafka_batch(50)], inline_threshold_bytes=0, attempt="1")
    later = write_state(
        tmp_path, [kafka_batch(30, start=500)], inline_threshold_bytes=0, attempt="2"
    )
    same_id = write_state(  # a zombie of an earlier run: Spark's taskAttemptId starts over
        tmp_path, [kafka_batch(20, start=900)], inline_threshold_bytes=0, attempt="1"
    )
    assert isinstance(committed, FileChannelState) and isinstance(later, FileChannelState)
    assert isinstance(same_id, FileChannelState)
    assert len({committed.path, later.path, same_id.path}) == 3
    assert rows_of(read_channel_state(committed, batch_rows=100)) == kafka_rows(50)
    assert rows_of(read_channel_state(later, batch_rows=100)) == kafka_rows(30, start=500)


def test_file_replaced_by_another_writer_is_detected(tmp_path: Path) -> None:
    """A file overwritten by another attempt's (no writer does so: its name is its own)."""
    first = write_state(tmp_path, [kafka_batch(50)], inline_threshold_bytes=0, attempt="1")
    second = write_state(tmp_path, [kafka_batch(50)], inline_threshold_bytes=0, attempt="2")
    assert isinstance(first, FileChannelState) and isinstance(second, FileChannelState)
    Path(second.path).replace(first.path)
    with pytest.raises(ChannelStateError, match=r"\(barrier 7, task 3\) was replaced by another"):
        read_channel_state(first, batch_rows=10)


def test_garbage_inline_state() -> None:
    ref = InlineChannelState(
        barrier_id=9,
        task_index=1,
        query_id="q",
        write_id="w",
        row_count=3,
        byte_size=7,
        crc32=zlib.crc32(b"garbage"),
        inline_avro=b"garbage",
    )
    with pytest.raises(ChannelStateError, match=r"inline state \(barrier 9, task 1\)"):
        read_channel_state(ref, batch_rows=10)


def test_corrupt_inline_bytes(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(200)], codec="deflate", inline_threshold_bytes=10**7)
    assert isinstance(ref, InlineChannelState)
    data = bytearray(ref.inline_avro)
    data[-200:-100] = bytes(100)
    broken = dataclasses.replace(ref, inline_avro=bytes(data))
    with pytest.raises(ChannelStateError, match=r"inline state \(barrier 7, task 3\) is corrupt"):
        read_channel_state(broken, batch_rows=1000)
    # damage the checksum does not see (a writer bug) still fails decoding, never skips rows
    lying = lying_ref(broken, broken.inline_avro)
    with pytest.raises(ChannelStateError, match=r"inline state \(barrier 7, task 3\) is corrupt"):
        rows_of(read_channel_state(lying, batch_rows=1000))


def test_expected_schema_must_match(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(5)])
    other = KAFKA_SCHEMA.set(0, pa.field("key", pa.binary(), nullable=False))
    with pytest.raises(ChannelStateError, match="differs from the sink input's"):
        read_channel_state(ref, batch_rows=5, expected_schema=other)
    assert rows_of(read_channel_state(ref, batch_rows=5, expected_schema=KAFKA_SCHEMA)) == (
        kafka_rows(5)
    )
