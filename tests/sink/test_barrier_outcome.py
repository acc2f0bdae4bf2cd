"""The driver at a barrier: garbage collection of channel state no record needs, barrier
metrics, and the idle-barrier hint (pending state for the record: test_pending_layout.py).
Local files only: real channel-state files written by the writer, real commit records, a
Spark-format offset log."""

from __future__ import annotations

import dataclasses
import json
import pickle
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from unaligned.barriers import idle as idle_barriers
from unaligned.barriers.alignment import BarrierAlignment
from unaligned.barriers.barrier import Barrier, Deadline
from unaligned.barriers.idle import HINT_DIR_ENV, PendingHint
from unaligned.barriers.metrics import TaskBarrierStats, read_metrics
from unaligned.channel_state.files import list_barrier_ids, list_state_files, query_state_dir
from unaligned.channel_state.reader import read_all
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState, InlineChannelState
from unaligned.channel_state.writer import ChannelStateWriter
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.stop_request import linked_location
from unaligned.sink.barrier_outcome import after_barrier, collect_channel_state_garbage
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.options import SinkOptions
from unaligned.sink.participant import SinkCommitMessage, TaskOutcome

SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
QUERY_ID = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"


def query_options(checkpoint: Path, query_id: str = QUERY_ID, **extra: str) -> SinkOptions:
    """Sink options of a query whose checkpoint holds Spark's ``metadata`` (its query id)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return SinkOptions.parse(
        {"checkpointLocation": str(checkpoint), "path": str(checkpoint.parent / "out"), **extra}
    )


@pytest.fixture
def options(tmp_path: Path) -> SinkOptions:
    return query_options(tmp_path / "ck")


def query_dir(options: SinkOptions, query_id: str = QUERY_ID) -> str:
    return query_state_dir(options.alignment.state_dir, query_id)


@pytest.fixture
def hint_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "hints"
    monkeypatch.setenv(HINT_DIR_ENV, str(directory))
    return directory


def state(
    options: SinkOptions,
    barrier_id: int,
    task: int,
    rows: int,
    *,
    attempt: str = "a0",
    inline: bool = False,
    query_id: str = QUERY_ID,
    state_dir: str | None = None,
) -> ChannelStateRef:
    """Real channel state of ``rows`` rows, written by the sink's writer (a file unless inline)
    into the query's directory, as a sink task does (``state_dir``: somewhere else)."""
    writer = ChannelStateWriter(
        state_dir=state_dir or query_dir(options, query_id),
        barrier_id=barrier_id,
        query_id=query_id,
        task_index=task,
        attempt=attempt,
        schema=SCHEMA,
        inline_threshold_bytes=10**6 if inline else 0,
    )
    writer.append(pa.record_batch([pa.array(range(rows), pa.int64())], schema=SCHEMA))
    ref = writer.finish()
    assert isinstance(ref, InlineChannelState if inline else FileChannelState)
    return ref


def message(
    batch_id: int,
    partition: int,
    pending: Sequence[ChannelStateRef] = (),
    stats: TaskBarrierStats | None = None,
) -> SinkCommitMessage:
    return SinkCommitMessage(
        batch_id=batch_id,
        partition_id=partition,
        attempt_number=0,
        rows=0,
        outcome=TaskOutcome.PREPARED,
        prepared={"task": partition},
        pending=tuple(pending),
        stats=stats.to_dict() if stats else None,
    )


def decide(
    options: SinkOptions, batch_id: int, channel_state: Mapping[int, Sequence[ChannelStateRef]]
) -> CommitRecord:
    record = CommitRecord(
        batch_id=batch_id,
        participant="files",
        prepared=(),
        decided_at_ms=0,
        channel_state={index: tuple(refs) for index, refs in channel_state.items()},
    )
    CommitLog(Checkpoint.resolve(options.checkpoint.location)).write(record)
    return record


def write_offset_log(
    options: SinkOptions, batch_id: int, start_ms: int, *source_lines: str
) -> None:
    """``<checkpoint>/offsets/<batchId>`` as Spark writes it (v1: one line per source)."""
    offsets = Path(options.checkpoint.location) / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    metadata = compact_json({"batchWatermarkMs": 0, "batchTimestampMs": start_ms, "conf": {}})
    (offsets / str(batch_id)).write_text("\n".join(["v1", metadata, *source_lines]))


def source_offset(token: str | None) -> str:
    offset: dict[str, object] = {"offsets": {"t": {"0": 10}}, "idleBarrier": 0}
    if token:
        offset["barrierToken"] = token
    return compact_json(offset)


def compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def state_files(options: SinkOptions, query_id: str = QUERY_ID) -> set[str]:
    """The path of every channel-state file in the query's directory."""
    directory = query_dir(options, query_id)
    return {
        f.path
        for barrier in list_barrier_ids(directory)
        for f in list_state_files(directory, barrier)
    }


def path_of(ref: ChannelStateRef) -> str:
    assert isinstance(ref, FileChannelState)
    return ref.path


def test_a_commit_message_with_pending_refs_survives_pickling(options: SinkOptions) -> None:
    """Spark pickles the task's commit message to the driver: the refs travel as objects."""
    refs = [state(options, 1, 0, 5), state(options, 1, 0, 3, attempt="a1", inline=True)]
    sent = message(1, 0, refs)
    received = pickle.loads(pickle.dumps(sent))
    assert received == sent and received.pending == tuple(refs)
    assert [type(ref) for ref in received.pending] == [FileChannelState, InlineChannelState]


# --- garbage collection of channel state ---------------------------------------------------------


def test_garbage_collection_keeps_exactly_what_the_newest_record_references(
    options: SinkOptions,
) -> None:
    replayed = state(options, 1, 0, 10)  # pending after barrier 1, replayed by barrier 2
    decide(options, 1, {0: [replayed]})
    carried = state(options, 2, 0, 10)  # pending after 2, carried forward by 3 by reference
    denied = state(options, 2, 1, 10)  # written by an attempt Spark denied: in no record
    decide(options, 2, {0: [carried]})
    new = state(options, 3, 1, 10)
    ChannelStateWriter(  # a failed attempt's temporary file, never finished
        state_dir=query_dir(options),
        barrier_id=3,
        query_id=QUERY_ID,
        task_index=0,
        attempt="failed1",
        schema=SCHEMA,
        inline_threshold_bytes=0,
    ).append(pa.record_batch([pa.array([1], pa.int64())], schema=SCHEMA))
    undecided = state(options, 4, 0, 10)  # a batch that never got a commit record
    decide(options, 3, {0: [carried.advanced(3)], 1: [new]})
    assert len(state_files(options)) == 6
    assert not isinstance(undecided, InlineChannelState)

    collect_channel_state_garbage(options)

    assert state_files(options) == {path_of(carried), path_of(new)}
    assert list_barrier_ids(query_dir(options)) == [2, 3]  # barrier 1 and 4 dirs gone
    assert not Path(replayed.path).exists() and not Path(denied.path).exists()  # type: ignore[attr-defined]
    # What is kept still replays completely.
    assert read_all(carried.advanced(3)).column("id").to_pylist() == list(range(3, 10))
    assert read_all(new).num_rows == 10
    collect_channel_state_garbage(options)  # idempotent
    assert state_files(options) == {path_of(carried), path_of(new)}


def test_garbage_collection_without_any_record_removes_all_state(options: SinkOptions) -> None:
    state(options, 0, 0, 5)
    state(options, 0, 1, 5)
    collect_channel_state_garbage(options)
    assert state_files(options) == set()
    collect_channel_state_garbage(options)  # nothing there at all: fine


def test_garbage_collection_with_only_inline_state_pending_removes_every_file(
    options: SinkOptions,
) -> None:
    state(options, 1, 0, 5)
    inline = state(options, 2, 0, 5, inline=True)
    decide(options, 2, {0: [inline]})
    collect_channel_state_garbage(options)
    assert state_files(options) == set()


def test_garbage_collection_looks_in_the_configured_state_path(tmp_path: Path) -> None:
    options = query_options(tmp_path / "ck", channelStatePath=str(tmp_path / "elsewhere"))
    kept, dropped = state(options, 1, 0, 5), state(options, 1, 1, 5)
    decide(options, 1, {0: [kept]})
    collect_channel_state_garbage(options)
    assert Path(path_of(kept)).exists() and not Path(path_of(dropped)).exists()
    assert Path(path_of(kept)).is_relative_to(tmp_path / "elsewhere" / QUERY_ID)


# --- after the barrier: metrics and the idle-barrier hint ---------------------------------------


def test_barrier_metrics_are_written_from_the_tasks_stats(
    options: SinkOptions, hint_dir: Path
) -> None:
    start_ms = int(time.time() * 1000) - 5_000
    write_offset_log(options, 4, start_ms, source_offset("tok1"))
    record = decide(options, 4, {})
    stats = [
        TaskBarrierStats(task_index=0, start_ms=start_ms + 30, cut=False, rows_written=100),
        TaskBarrierStats(
            task_index=1,
            start_ms=start_ms + 10,
            cut=True,
            rows_written=40,
            rows_replayed=15,
            rows_carried=5,
            rows_spilled=60,
            state_file_bytes=900,
        ),
    ]
    before_ms = int(time.time() * 1000)
    after_barrier(options, record, [message(4, 0, stats=stats[0]), message(4, 1, stats=stats[1])])
    after_ms = int(time.time() * 1000)

    (metrics,) = read_metrics(Checkpoint.resolve(options.checkpoint.location))
    assert metrics.batch_id == 4 and metrics.tasks == 2 and metrics.tasks_cut == 1
    assert metrics.mode == "unaligned"
    assert (
        metrics.rows_written,
        metrics.rows_replayed,
        metrics.rows_carried,
        metrics.rows_spilled,
    ) == (
        140,
        15,
        5,
        60,
    )
    assert metrics.start_delay_ms == 10  # first task start minus the batch start in the offset log
    assert before_ms - start_ms <= metrics.duration_ms <= after_ms - start_ms
    assert metrics.channel_state_files == 1 and metrics.channel_state_bytes == 900


def test_no_metrics_without_task_stats(options: SinkOptions, hint_dir: Path) -> None:
    write_offset_log(options, 4, int(time.time() * 1000), source_offset("tok1"))
    record = decide(options, 4, {})
    after_barrier(options, record, [message(4, 0), message(4, 1)])
    assert read_metrics(Checkpoint.resolve(options.checkpoint.location)) == []


def test_hint_counts_the_rows_still_to_replay(options: SinkOptions, hint_dir: Path) -> None:
    write_offset_log(options, 6, int(time.time() * 1000), source_offset("tok1"))
    carried = state(options, 5, 0, 100).advanced(40)  # 60 rows left
    record = decide(options, 6, {0: [carried], 3: [state(options, 6, 3, 5, inline=True)]})
    after_barrier(options, record, [message(6, 0, [carried])])
    assert idle_barriers.read("tok1") == PendingHint(batch_id=6, pending_rows=65)


def test_hint_is_cleared_once_nothing_is_pending(options: SinkOptions, hint_dir: Path) -> None:
    now = int(time.time() * 1000)
    write_offset_log(options, 6, now, source_offset("tok1"))
    write_offset_log(options, 7, now, source_offset("tok1"))
    pending = state(options, 6, 0, 5)
    after_barrier(options, decide(options, 6, {0: [pending]}), [message(6, 0, [pending])])
    assert idle_barriers.read("tok1") == PendingHint(6, 5)
    after_barrier(options, decide(options, 7, {}), [message(7, 0)])
    assert idle_barriers.read("tok1") is None
    # only the link through which the source finds stop requests stays
    assert [p.name for p in hint_dir.iterdir()] == ["tok1.checkpoint"]


def test_hint_goes_to_every_source_token_and_only_to_tokens(
    options: SinkOptions, hint_dir: Path
) -> None:
    # Three sources: two of ours (one token each), one without a token; plus one Spark wrote "-".
    write_offset_log(
        options,
        2,
        int(time.time() * 1000),
        source_offset("tokA"),
        source_offset(None),
        "-",
        source_offset("tokB"),
    )
    pending = state(options, 2, 0, 3, inline=True)
    after_barrier(options, decide(options, 2, {0: [pending]}), [message(2, 0, [pending])])
    assert sorted(p.name for p in hint_dir.iterdir()) == [
        "tokA.checkpoint",
        "tokA.json",
        "tokB.checkpoint",
        "tokB.json",
    ]
    assert linked_location("tokA") == linked_location("tokB") == options.checkpoint.location
    assert idle_barriers.read("tokA") == idle_barriers.read("tokB") == PendingHint(2, 3)


# --- issue 8: attempts sharing a name, queries sharing a path, the older layout -----------------


def spill(
    options: SinkOptions, query_id: str, barrier_id: int, attempt_id: str, first: int
) -> ChannelStateRef:
    """What a sink task at ``barrier_id`` leaves pending when it is past its deadline at once:
    one chunk written, the other 90 of its 100 rows (``first`` ..) spilled to a file."""
    barrier = Barrier(batch_id=barrier_id, start_ms=0, query_id=query_id)
    batch = pa.record_batch([pa.array(range(first, first + 100), pa.int64())], schema=SCHEMA)
    alignment = BarrierAlignment(
        dataclasses.replace(options.alignment, chunk_rows=10, inline_threshold_bytes=0),
        barrier,
        Deadline(0, 0, lambda: 1.0),
        task_index=0,
        attempt_number=0,
        attempt_id=attempt_id,
        inherited=(),
    )
    (ref,) = alignment.run(iter([batch]), lambda chunk: None, lambda: 1.0).pending
    assert isinstance(ref, FileChannelState)
    return ref


def ids(ref: ChannelStateRef) -> list[int]:
    return list(read_all(ref).column("id").to_pylist())


def test_attempts_of_one_task_never_share_a_file_and_the_losers_are_collected(
    options: SinkOptions,
) -> None:
    """Issue 8.1: a speculative copy, and a zombie of an earlier run with the same Spark
    taskAttemptId, finish after the attempt whose ref the commit record holds."""
    committed = spill(options, QUERY_ID, 1, "7", first=0)
    speculative = spill(options, QUERY_ID, 1, "8", first=1000)
    zombie = spill(options, QUERY_ID, 1, "7", first=2000)
    decide(options, 1, {0: [committed]})
    assert ids(committed) == list(range(10, 100))
    assert len(state_files(options)) == 3
    collect_channel_state_garbage(options)
    assert ids(committed) == list(range(10, 100))  # the committed attempt's rows, intact
    assert state_files(options) == {path_of(committed)}
    assert not Path(path_of(speculative)).exists() and not Path(path_of(zombie)).exists()


def test_queries_sharing_a_channel_state_path_keep_their_own_state(tmp_path: Path) -> None:
    """Issue 8.2: two queries with the same channelStatePath, at the same barrier and task."""
    shared = str(tmp_path / "shared")
    a = query_options(tmp_path / "ck-a", "query-a", channelStatePath=shared)
    b = query_options(tmp_path / "ck-b", "query-b", channelStatePath=shared)
    state_a, state_b = spill(a, "query-a", 1, "3", first=0), spill(b, "query-b", 1, "3", first=500)
    decide(a, 1, {0: [state_a]})
    decide(b, 1, {})  # query b's batch failed: its file is garbage, but only to query b
    collect_channel_state_garbage(a)
    assert Path(path_of(state_b)).exists()
    assert ids(state_a) == list(range(10, 100))
    collect_channel_state_garbage(b)
    assert not Path(path_of(state_b)).exists()
    assert ids(state_a) == list(range(10, 100))
    decide(a, 2, {})
    collect_channel_state_garbage(a)
    assert not Path(path_of(state_a)).exists()


def test_garbage_collection_without_the_query_id_deletes_nothing(tmp_path: Path) -> None:
    options = query_options(tmp_path / "ck")
    unreferenced = state(options, 1, 0, 5)
    (tmp_path / "ck" / "metadata").unlink()
    collect_channel_state_garbage(options)
    assert Path(path_of(unreferenced)).exists()
