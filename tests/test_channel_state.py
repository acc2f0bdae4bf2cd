"""Channel state: round trips, inline threshold, corruption, carry-forward, bounded memory."""

from __future__ import annotations

import dataclasses
import io
import zlib
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from unaligned.channel_state import (
    CODECS,
    META_BARRIER_ID,
    META_SCHEMA_VERSION,
    ChannelStateRef,
    ChannelStateWriter,
    FileChannelState,
    InlineChannelState,
    check_codec,
    delete_barrier_state,
    delete_channel_state,
    list_barrier_ids,
    list_state_files,
    read_all,
    read_channel_state,
)
from unaligned.errors import ChannelStateError, OptionError, SchemaMismatchError

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
KAFKA_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", HEADER, nullable=False))),
    ]
)


def kafka_rows(count: int, start: int = 0, value_bytes: int = 100) -> list[dict]:
    rows = []
    for i in range(start, start + count):
        rows.append(
            {
                "key": None if i % 3 == 0 else f"key-{i}".encode(),
                "value": None if i % 7 == 0 else (f"{i:08d}".encode() * value_bytes)[:value_bytes],
                "topic": None if i % 11 == 0 else "events",
                "partition": None if i % 2 else i % 4,
                "headers": None
                if i % 5 == 0
                else [{"key": "h", "value": None}, {"key": "n", "value": str(i).encode()}][: i % 3],
            }
        )
    return rows


def kafka_batch(count: int, start: int = 0, value_bytes: int = 100) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(kafka_rows(count, start, value_bytes), schema=KAFKA_SCHEMA)


def make_writer(state_dir: Path | str, **overrides) -> ChannelStateWriter:
    options = dict(
        state_dir=str(state_dir),
        barrier_id=7,
        query_id="query-1",
        task_index=3,
        attempt="42",
        schema=KAFKA_SCHEMA,
    )
    options.update(overrides)
    return ChannelStateWriter(**options)


def write_state(state_dir: Path, batches: list[pa.RecordBatch], **overrides) -> ChannelStateRef:
    writer = make_writer(state_dir, **overrides)
    for batch in batches:
        writer.append(batch)
    return writer.finish()


def rows_of(batches) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


def codec_or_skip(codec: str) -> str:
    try:
        check_codec(codec)
    except OptionError as exc:
        pytest.skip(str(exc))
    return codec


# --- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("threshold", [0, 10_000_000], ids=["file", "inline"])
def test_round_trip_every_codec(tmp_path: Path, codec: str, threshold: int) -> None:
    codec = codec_or_skip(codec)
    batches = [
        kafka_batch(300),
        kafka_batch(1, 300),
        kafka_batch(0, 301),
        kafka_batch(710, 301).slice(0, 700),
    ]
    ref = write_state(
        tmp_path, batches, codec=codec, inline_threshold_bytes=threshold, block_bytes=8192
    )
    assert isinstance(ref, FileChannelState if threshold == 0 else InlineChannelState)
    assert (ref.barrier_id, ref.task_index, ref.query_id) == (7, 3, "query-1")
    assert ref.row_count == 1001 and ref.start_row == 0
    replayed = list(read_channel_state(ref, batch_rows=128))
    for batch in replayed:
        assert batch.schema.equals(KAFKA_SCHEMA, check_metadata=True)
        assert 0 < batch.num_rows <= 128
    table = pa.Table.from_batches(replayed)
    assert table.equals(pa.Table.from_batches(batches))
    assert rows_of(replayed) == kafka_rows(1001)


def test_codec_is_recorded_in_the_file(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(50)], codec="deflate", inline_threshold_bytes=0)
    with open(ref.path, "rb") as f:
        assert fastavro.reader(f).metadata["avro.codec"] == "deflate"


def test_non_nullable_column_with_nulls_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("value", pa.binary(), nullable=False)])
    batch = pa.RecordBatch.from_arrays([pa.array([b"a", None])], schema=schema)
    with pytest.raises(SchemaMismatchError, match="non-nullable column 'value' holds nulls"):
        make_writer(tmp_path, schema=schema).append(batch)


def test_writer_refuses_an_unstorable_schema_and_batches_of_another(tmp_path: Path) -> None:
    # the Avro mapping (tests/test_avro_rows.py) refuses in the constructor, before any file
    with pytest.raises(SchemaMismatchError, match=r"column 'm' has type map<string, int32>"):
        make_writer(tmp_path, schema=pa.schema([("m", pa.map_(pa.string(), pa.int32()))]))
    assert list(tmp_path.iterdir()) == []
    writer = make_writer(tmp_path)
    other = pa.RecordBatch.from_pylist([{"value": b"x"}])
    with pytest.raises(SchemaMismatchError, match="barrier 7, task 3"):
        writer.append(other)


# --- inline threshold -----------------------------------------------------------------------------


def test_small_state_is_inline_and_writes_no_file(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(20)], inline_threshold_bytes=64 * 1024)
    assert isinstance(ref, InlineChannelState)
    assert ref.byte_size == len(ref.inline_avro) < 64 * 1024
    assert list(tmp_path.iterdir()) == []
    assert rows_of(read_channel_state(ref, batch_rows=7)) == kafka_rows(20)


def test_threshold_boundary_is_inclusive(tmp_path: Path) -> None:
    size = write_state(tmp_path, [kafka_batch(40)], inline_threshold_bytes=10**9).byte_size
    at = write_state(tmp_path, [kafka_batch(40)], inline_threshold_bytes=size)
    below = write_state(tmp_path, [kafka_batch(40)], inline_threshold_bytes=size - 1)
    assert isinstance(at, InlineChannelState) and at.byte_size == size
    assert isinstance(below, FileChannelState) and below.byte_size == size
    assert Path(below.path).stat().st_size == size
    assert rows_of(read_channel_state(below, batch_rows=100)) == kafka_rows(40)


def test_empty_state(tmp_path: Path) -> None:
    ref = make_writer(tmp_path).finish()
    assert isinstance(ref, InlineChannelState) and ref.row_count == 0 and ref.exhausted
    assert list(read_channel_state(ref, batch_rows=10)) == []
    assert read_all(ref).schema.equals(KAFKA_SCHEMA)


# --- files: naming, write-then-rename, bounded memory ---------------------------------------------


def test_file_is_written_under_a_temporary_name_and_renamed(tmp_path: Path) -> None:
    writer = make_writer(tmp_path, inline_threshold_bytes=0, block_bytes=4096)
    writer.append(kafka_batch(500))
    barrier_dir = tmp_path / "barrier-7"
    assert [p.name for p in barrier_dir.iterdir()] == ["task-3.attempt-42.avro.tmp"]
    [temp] = list_state_files(str(tmp_path), 7)
    assert (temp.task_index, temp.attempt, temp.barrier_id) == (3, "42", 7)
    ref = writer.finish()
    assert isinstance(ref, FileChannelState)
    assert [p.name for p in barrier_dir.iterdir()] == ["task-3.avro"]
    assert ref.path == str(barrier_dir / "task-3.avro")
    assert ref.uri == str(barrier_dir / "task-3.avro")
    [final] = list_state_files(str(tmp_path), 7)
    assert (final.attempt, final.size_bytes) == (None, ref.byte_size)
    assert list_barrier_ids(str(tmp_path)) == [7]


def test_writer_streams_to_the_file_with_bounded_memory(tmp_path: Path) -> None:
    block_bytes = 16 * 1024
    writer = make_writer(tmp_path, inline_threshold_bytes=4096, block_bytes=block_bytes)
    temp = tmp_path / "barrier-7" / "task-3.attempt-42.avro.tmp"
    sizes = []
    appended_value_bytes = 0
    for i in range(40):
        batch = kafka_batch(200, start=i * 200, value_bytes=100)
        writer.append(batch)
        appended_value_bytes += sum(len(v) for v in batch.column("value").to_pylist() if v)
        assert writer.spilled and writer.memory_bytes == 0
        sizes.append(temp.stat().st_size)
        # everything but the pending block (and a block's framing) is on disk already
        assert sizes[-1] >= appended_value_bytes - 2 * block_bytes
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0] * 10
    ref = writer.finish()
    assert ref.row_count == 8000
    assert rows_of(read_channel_state(ref, batch_rows=1000)) == kafka_rows(8000)


def test_memory_before_the_spill_stays_within_the_threshold(tmp_path: Path) -> None:
    writer = make_writer(tmp_path, inline_threshold_bytes=50_000, block_bytes=2048)
    for i in range(60):
        writer.append(kafka_batch(10, start=i * 10))
        assert writer.memory_bytes <= 50_000
    assert writer.spilled
    assert isinstance(writer.finish(), FileChannelState)


def test_discard_removes_the_temporary_file(tmp_path: Path) -> None:
    writer = make_writer(tmp_path, inline_threshold_bytes=0)
    writer.append(kafka_batch(10))
    writer.discard()
    writer.discard()
    assert list_state_files(str(tmp_path), 7) == []
    with pytest.raises(ChannelStateError, match="already finished or discarded"):
        writer.append(kafka_batch(1))


def test_context_manager_discards_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with make_writer(tmp_path, inline_threshold_bytes=0) as writer:
            writer.append(kafka_batch(10))
            raise RuntimeError("task failed")
    assert list_state_files(str(tmp_path), 7) == []


def test_passed_filesystem_needs_the_same_filesystem_to_read(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    fs = pafs.SubTreeFileSystem(str(tmp_path / "root"), pafs.LocalFileSystem())
    ref = write_state(Path("state"), [kafka_batch(30)], inline_threshold_bytes=0, filesystem=fs)
    assert isinstance(ref, FileChannelState) and ref.uri is None
    assert ref.path == "state/barrier-7/task-3.avro"
    assert (tmp_path / "root" / "state" / "barrier-7" / "task-3.avro").exists()
    with pytest.raises(ChannelStateError, match="pass the same filesystem"):
        read_channel_state(ref, batch_rows=10)
    assert rows_of(read_channel_state(ref, batch_rows=10, filesystem=fs)) == kafka_rows(30)
    assert [f.task_index for f in list_state_files("state", 7, filesystem=fs)] == [3]


def test_file_uri_state_dir(tmp_path: Path) -> None:
    ref = write_state(f"file://{tmp_path}/cp/state", [kafka_batch(5)], inline_threshold_bytes=0)
    assert isinstance(ref, FileChannelState)
    assert ref.uri == f"file://{tmp_path}/cp/state/barrier-7/task-3.avro"
    assert rows_of(read_channel_state(ChannelStateRef.from_json(ref.to_json()), batch_rows=2)) == (
        kafka_rows(5)
    )


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


@pytest.fixture
def file_ref(tmp_path: Path) -> FileChannelState:
    batches = [kafka_batch(100, start=i * 100) for i in range(5)]
    ref = write_state(tmp_path, batches, inline_threshold_bytes=0, block_bytes=4096)
    assert isinstance(ref, FileChannelState)
    return ref


def test_truncated_file(file_ref: FileChannelState) -> None:
    data = Path(file_ref.path).read_bytes()
    Path(file_ref.path).write_bytes(data[: len(data) // 2])
    with pytest.raises(ChannelStateError, match=r"task-3\.avro \(barrier 7, task 3\) is trunc"):
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
    with pytest.raises(ChannelStateError, match=r"task-3\.avro \(barrier 7, task 3\) is missing"):
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


def test_file_replaced_by_another_attempt_is_detected(tmp_path: Path) -> None:
    first = write_state(tmp_path, [kafka_batch(50)], inline_threshold_bytes=0, attempt="1")
    second = write_state(tmp_path, [kafka_batch(50)], inline_threshold_bytes=0, attempt="2")
    assert isinstance(first, FileChannelState) and first.path == second.path
    with pytest.raises(ChannelStateError, match=r"\(barrier 7, task 3\) was replaced by another"):
        read_channel_state(first, batch_rows=10)
    assert rows_of(read_channel_state(second, batch_rows=100)) == kafka_rows(50)


def test_garbage_inline_state() -> None:
    ref = InlineChannelState(
        barrier_id=9, task_index=1, query_id="q", write_id="w", row_count=3, byte_size=7,
        crc32=zlib.crc32(b"garbage"), inline_avro=b"garbage",
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


# --- deletion -------------------------------------------------------------------------------------


def test_delete_channel_state_is_idempotent(tmp_path: Path) -> None:
    refs = [
        write_state(tmp_path, [kafka_batch(20)], inline_threshold_bytes=0, task_index=i)
        for i in range(3)
    ] + [write_state(tmp_path, [kafka_batch(2)], task_index=9)]
    assert len(list_state_files(str(tmp_path), 7)) == 3
    assert delete_channel_state(refs) == 3
    assert delete_channel_state(refs) == 0
    assert list_state_files(str(tmp_path), 7) == []
    with pytest.raises(ChannelStateError, match="is missing"):
        read_channel_state(refs[0], batch_rows=10)


def test_delete_barrier_state_removes_stale_attempts(tmp_path: Path) -> None:
    stale = make_writer(tmp_path, inline_threshold_bytes=0, attempt="crashed")
    stale.append(kafka_batch(10))  # never finished: the attempt "crashed"
    write_state(tmp_path, [kafka_batch(10)], inline_threshold_bytes=0, attempt="ok")
    write_state(tmp_path, [kafka_batch(10)], inline_threshold_bytes=0, barrier_id=8)
    files = list_state_files(str(tmp_path), 7)
    assert sorted((f.task_index, f.attempt or "") for f in files) == [(3, ""), (3, "crashed")]
    delete_barrier_state(str(tmp_path), 7)
    delete_barrier_state(str(tmp_path), 7)
    assert list_state_files(str(tmp_path), 7) == []
    assert list_barrier_ids(str(tmp_path)) == [8]


def test_inline_bytes_are_a_complete_avro_file(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(4)])
    assert isinstance(ref, InlineChannelState)
    records = list(fastavro.reader(io.BytesIO(ref.inline_avro)))
    assert [r["value"] for r in records] == [r["value"] for r in kafka_rows(4)]
