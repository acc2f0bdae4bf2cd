"""ChannelStateWriter: round trips, inline threshold, write-then-rename, bounded memory."""

from __future__ import annotations

import io
import re
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from channel_state_rows import (
    KAFKA_SCHEMA,
    kafka_batch,
    kafka_rows,
    make_writer,
    rows_of,
    write_state,
)
from unaligned.channel_state.codecs import CODECS, check_codec
from unaligned.channel_state.files import list_barrier_ids, list_state_files
from unaligned.channel_state.reader import read_all, read_channel_state
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState, InlineChannelState
from unaligned.errors import ChannelStateError, OptionError, SchemaMismatchError


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


def test_inline_bytes_are_a_complete_avro_file(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(4)])
    assert isinstance(ref, InlineChannelState)
    records = list(fastavro.reader(io.BytesIO(ref.inline_avro)))
    assert [r["value"] for r in records] == [r["value"] for r in kafka_rows(4)]


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


# --- files: write-then-rename, bounded memory ----------------------------------------------------


def test_file_is_written_under_a_temporary_name_and_renamed(tmp_path: Path) -> None:
    writer = make_writer(tmp_path, inline_threshold_bytes=0, block_bytes=4096)
    writer.append(kafka_batch(500))
    barrier_dir = tmp_path / "barrier-7"
    [temp_path] = barrier_dir.iterdir()
    assert re.fullmatch(r"task-3\.attempt-42\.([0-9a-f]{32})\.avro\.tmp", temp_path.name)
    [temp] = list_state_files(str(tmp_path), 7)
    assert (temp.task_index, temp.attempt, temp.barrier_id, temp.finished) == (3, "42", 7, False)
    ref = writer.finish()
    assert isinstance(ref, FileChannelState)
    name = f"task-3.attempt-42.{ref.write_id}.avro"  # unique per attempt and per writer
    assert temp_path.name == f"{name}.tmp"
    assert [p.name for p in barrier_dir.iterdir()] == [name]
    assert ref.path == str(barrier_dir / name)
    assert ref.uri == str(barrier_dir / name)
    [final] = list_state_files(str(tmp_path), 7)
    assert (final.attempt, final.write_id, final.finished) == ("42", ref.write_id, True)
    assert final.size_bytes == ref.byte_size
    assert list_barrier_ids(str(tmp_path)) == [7]


def test_writer_streams_to_the_file_with_bounded_memory(tmp_path: Path) -> None:
    block_bytes = 16 * 1024
    writer = make_writer(tmp_path, inline_threshold_bytes=4096, block_bytes=block_bytes)
    temps: list[Path] = []
    sizes = []
    appended_value_bytes = 0
    for i in range(40):
        batch = kafka_batch(200, start=i * 200, value_bytes=100)
        writer.append(batch)
        appended_value_bytes += sum(len(v) for v in batch.column("value").to_pylist() if v)
        assert writer.spilled and writer.memory_bytes == 0
        temps = temps or list((tmp_path / "barrier-7").glob("task-3.attempt-42.*.avro.tmp"))
        sizes.append(temps[0].stat().st_size)
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
    assert ref.path == f"state/barrier-7/task-3.attempt-42.{ref.write_id}.avro"
    assert (tmp_path / "root" / ref.path).exists()
    with pytest.raises(ChannelStateError, match="pass the same filesystem"):
        read_channel_state(ref, batch_rows=10)
    assert rows_of(read_channel_state(ref, batch_rows=10, filesystem=fs)) == kafka_rows(30)
    assert [f.task_index for f in list_state_files("state", 7, filesystem=fs)] == [3]


def test_file_uri_state_dir(tmp_path: Path) -> None:
    ref = write_state(f"file://{tmp_path}/cp/state", [kafka_batch(5)], inline_threshold_bytes=0)
    assert isinstance(ref, FileChannelState)
    assert ref.uri == f"file://{tmp_path}/cp/state/barrier-7/task-3.attempt-42.{ref.write_id}.avro"
    assert rows_of(read_channel_state(ChannelStateRef.from_json(ref.to_json()), batch_rows=2)) == (
        kafka_rows(5)
    )
