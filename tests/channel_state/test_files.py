"""Channel state on disk: naming, listing, deletion of refs' files and of whole barriers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import channel_state_rows
from unaligned.channel_state.files import (
    ATTEMPT_NAME,
    StateFile,
    barrier_dir_name,
    delete_barrier_state,
    delete_channel_state,
    list_barrier_ids,
    list_state_files,
    query_state_dir,
    state_file_name,
    temp_file_name,
)
from unaligned.channel_state.reader import read_channel_state
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState
from unaligned.channel_state.writer import ChannelStateWriter
from unaligned.errors import ChannelStateError

SCHEMA = pa.schema([pa.field("value", pa.binary())])


def value_batch(count: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"value": f"{i:08d}".encode() * 12} for i in range(count)], schema=SCHEMA
    )


def make_writer(state_dir: Path | str, **overrides: object) -> ChannelStateWriter:
    """The shared test writer, over this file's one-column schema."""
    return channel_state_rows.make_writer(state_dir, **{"schema": SCHEMA, **overrides})


def write_state(state_dir: Path | str, batch: pa.RecordBatch, **overrides) -> ChannelStateRef:
    writer = make_writer(state_dir, **overrides)
    writer.append(batch)
    return writer.finish()


# --- naming and listing ---------------------------------------------------------------------------


def test_listing_finds_the_named_files_and_nothing_else(tmp_path: Path) -> None:
    barrier = tmp_path / barrier_dir_name(7)
    barrier.mkdir()
    (barrier / state_file_name(3, "17", "w1")).write_bytes(b"x" * 5)
    (barrier / temp_file_name(3, "attempt_9-b", "w2")).write_bytes(b"x" * 2)
    (barrier / temp_file_name(12, "1", "w3")).write_bytes(b"")
    decoys = (
        "task-4.avro",  # names of 0.1.0 development snapshots: not listed
        "task-4.attempt-8.avro.tmp",
        "task-x.avro",
        "task-1.avro.tmp",
        "task-1.attempt-a.b.c.avro.tmp",
        "task-1.attempt-.w.avro",
        "task-1.attempt-a b.w.avro",
        "notes.txt",
    )
    for decoy in decoys:
        (barrier / decoy).write_bytes(b"?")
    (barrier / state_file_name(5, "1", "w")).mkdir()  # a directory, not a file
    (tmp_path / barrier_dir_name(8)).mkdir()
    (tmp_path / "barrier-x").mkdir()
    (tmp_path / barrier_dir_name(9)).write_bytes(b"")  # a file, not a barrier directory

    assert list_state_files(str(tmp_path), 7) == [
        StateFile(str(barrier / "task-12.attempt-1.w3.avro.tmp"), 7, 12, "1", 0, False, "w3"),
        StateFile(str(barrier / "task-3.attempt-17.w1.avro"), 7, 3, "17", 5, True, "w1"),
        StateFile(
            str(barrier / "task-3.attempt-attempt_9-b.w2.avro.tmp"),
            7,
            3,
            "attempt_9-b",
            2,
            False,
            "w2",
        ),
    ]
    assert list_state_files(str(tmp_path), 8) == []
    assert list_barrier_ids(str(tmp_path)) == [7, 8]


def test_each_query_has_a_directory_of_its_own(tmp_path: Path) -> None:
    root = str(tmp_path / "shared")
    assert query_state_dir(root, "0f1e2d3c-aaaa-bbbb") == f"{root}/0f1e2d3c-aaaa-bbbb"
    assert query_state_dir(root + "/", "q1") == f"{root}/q1"
    for bad in ("", "../x", "a/b", "a.b"):
        with pytest.raises(ChannelStateError, match="cannot name a channel-state directory"):
            query_state_dir(root, bad)


def test_a_missing_state_dir_lists_nothing_and_deletes_nothing(tmp_path: Path) -> None:
    missing = str(tmp_path / "never-written")
    assert list_barrier_ids(missing) == []
    assert list_state_files(missing, 7) == []
    delete_barrier_state(missing, 7)
    assert not (tmp_path / "never-written").exists()


def test_attempt_names_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    for good in ("42", "attempt_9-b", "A"):
        assert ATTEMPT_NAME.match(good)
    for bad in ("", "a/b", "a.b", "../x", "a b"):
        assert not ATTEMPT_NAME.match(bad)
        with pytest.raises(ValueError, match="must match"):
            make_writer(tmp_path, attempt=bad)
    assert list(tmp_path.iterdir()) == []


# --- deletion -------------------------------------------------------------------------------------


def test_delete_channel_state_is_idempotent(tmp_path: Path) -> None:
    refs = [
        write_state(tmp_path, value_batch(20), inline_threshold_bytes=0, task_index=i)
        for i in range(3)
    ] + [write_state(tmp_path, value_batch(2), task_index=9)]
    assert len(list_state_files(str(tmp_path), 7)) == 3
    assert delete_channel_state(refs) == 3
    assert delete_channel_state(refs) == 0
    assert list_state_files(str(tmp_path), 7) == []
    with pytest.raises(ChannelStateError, match="is missing"):
        read_channel_state(refs[0], batch_rows=10)


def test_delete_channel_state_needs_the_writers_filesystem(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    fs = pafs.SubTreeFileSystem(str(tmp_path / "root"), pafs.LocalFileSystem())
    ref = write_state("state", value_batch(20), inline_threshold_bytes=0, filesystem=fs)
    assert isinstance(ref, FileChannelState) and ref.uri is None
    with pytest.raises(ChannelStateError, match="pass the same filesystem"):
        delete_channel_state([ref])
    assert (tmp_path / "root" / ref.path).exists()
    assert delete_channel_state([ref], filesystem=fs) == 1
    assert list_state_files("state", 7, filesystem=fs) == []
    assert list_barrier_ids("state", filesystem=fs) == [7]


def test_delete_barrier_state_removes_stale_attempts(tmp_path: Path) -> None:
    stale = make_writer(tmp_path, inline_threshold_bytes=0, attempt="crashed")
    stale.append(value_batch(10))  # never finished: the attempt "crashed"
    write_state(tmp_path, value_batch(10), inline_threshold_bytes=0, attempt="ok")
    write_state(tmp_path, value_batch(10), inline_threshold_bytes=0, barrier_id=8)
    files = list_state_files(str(tmp_path), 7)
    assert sorted((f.task_index, f.attempt, f.finished) for f in files) == [
        (3, "crashed", False),
        (3, "ok", True),
    ]
    delete_barrier_state(str(tmp_path), 7)
    delete_barrier_state(str(tmp_path), 7)
    assert list_state_files(str(tmp_path), 7) == []
    assert list_barrier_ids(str(tmp_path)) == [8]
