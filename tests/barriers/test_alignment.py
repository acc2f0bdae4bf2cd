"""The sink task's barrier logic: replay first, cut at the deadline, spill, carry forward."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from unaligned.barriers.alignment import (
    AlignmentSettings,
    BarrierAlignment,
    CheckpointMode,
    TaskBarrierOutcome,
)
from unaligned.barriers.barrier import Barrier, Deadline
from unaligned.channel_state.reader import read_all
from unaligned.channel_state.refs import FileChannelState, InlineChannelState

SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary())])


def rows(start: int, count: int, per_batch: int = 10) -> Iterator[pa.RecordBatch]:
    for first in range(start, start + count, per_batch):
        n = min(per_batch, start + count - first)
        yield pa.record_batch(
            [
                pa.array([f"k{i % 3}".encode() for i in range(first, first + n)]),
                pa.array([f"v{i:06d}".encode() + b"x" * 100 for i in range(first, first + n)]),
            ],
            schema=SCHEMA,
        )


def values(batches: list[pa.RecordBatch]) -> list[int]:
    return [int(v[1:7]) for b in batches for v in b.column("value").to_pylist()]


class Clock:
    """Wall clock in ms that advances a fixed step each time a chunk is written."""

    def __init__(self, start_ms: int) -> None:
        self.now = float(start_ms)

    def __call__(self) -> float:
        return self.now


def settings(
    tmp_path: Path, mode: CheckpointMode = CheckpointMode.UNALIGNED, **kw: int
) -> AlignmentSettings:
    return AlignmentSettings(
        mode=mode,
        timeout_ms=kw.get("timeout_ms", 100),
        max_inflight_bytes=kw.get("max_inflight_bytes", 10**9),
        chunk_rows=kw.get("chunk_rows", 10),
        state_dir=str(tmp_path / "state"),
        codec="deflate",
        inline_threshold_bytes=kw.get("inline", 0),
        max_state_files=kw.get("max_files", 8),
        merge_below_bytes=kw.get("merge_below", 0),
    )


def run_barrier(
    tmp_path: Path,
    batch_id: int,
    inherited: tuple,
    new_rows: Iterator[pa.RecordBatch],
    *,
    ms_per_chunk: int,
    mode: CheckpointMode = CheckpointMode.UNALIGNED,
    attempt_id: str | None = None,
    query_id: str = "q1",
    input_schema: pa.Schema | None = None,
    **kw: int,
) -> tuple[TaskBarrierOutcome, list[pa.RecordBatch]]:
    clock = Clock(1_000_000)
    barrier = Barrier(batch_id=batch_id, start_ms=1_000_000, query_id=query_id)
    written: list[pa.RecordBatch] = []

    def write_chunk(chunk: pa.RecordBatch) -> None:
        written.append(chunk)
        clock.now += ms_per_chunk

    alignment = BarrierAlignment(
        settings(tmp_path, mode, **kw),
        barrier,
        Deadline(barrier.start_ms, kw.get("timeout_ms", 100), clock),
        task_index=0,
        attempt_number=0,
        attempt_id=attempt_id or f"a{batch_id}",
        inherited=inherited,
        input_schema=input_schema,
    )
    return alignment.run(new_rows, write_chunk, clock), written


def test_aligned_mode_writes_everything_whatever_the_time(tmp_path: Path) -> None:
    outcome, written = run_barrier(
        tmp_path, 1, (), rows(0, 100), ms_per_chunk=1000, mode=CheckpointMode.ALIGNED
    )
    assert values(written) == list(range(100))
    assert outcome.pending == ()
    assert not outcome.stats.cut and outcome.stats.rows_written == 100


def test_unaligned_cut_spills_the_rest_and_next_barrier_replays_it_first(tmp_path: Path) -> None:
    # 25 ms per 10-row chunk, 100 ms timeout: 4 chunks written, then the cut.
    outcome, written = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=25)
    assert values(written) == list(range(40))
    assert outcome.stats.cut and outcome.stats.rows_spilled == 60
    (state,) = outcome.pending
    assert isinstance(state, FileChannelState) and state.row_count == 60
    assert outcome.stats.state_file_bytes == state.byte_size > 0

    # Next barrier, fast sink: replays the 60 spilled rows before its own 50 new rows.
    outcome2, written2 = run_barrier(tmp_path, 2, outcome.pending, rows(100, 50), ms_per_chunk=1)
    assert values(written2) == list(range(40, 100)) + list(range(100, 150))
    assert outcome2.pending == () and outcome2.stats.rows_replayed == 60


def test_timeout_during_replay_carries_the_rest_forward_by_reference(tmp_path: Path) -> None:
    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=50)  # 2 chunks, 80 spilled
    (state,) = first.pending
    second, written = run_barrier(tmp_path, 2, first.pending, rows(100, 30), ms_per_chunk=50)
    assert values(written) == list(range(20, 40))  # two replayed chunks, then the cut
    carried, spilled = second.pending
    assert isinstance(carried, FileChannelState)
    assert carried.path == state.path and carried.start_row == 20  # same file, not rewritten
    assert second.stats.rows_carried == 60 and second.stats.rows_spilled == 30
    third, written3 = run_barrier(tmp_path, 3, second.pending, rows(130, 0), ms_per_chunk=0)
    assert values(written3) == list(range(40, 130))
    assert third.pending == ()


def test_small_carried_state_is_merged_ahead_of_the_drained_input(tmp_path: Path) -> None:
    """Step 3a: under 'channelStateMergeBelow' the rest of the inherited state and the new
    spill become one file, inherited rows first."""
    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=50)  # 80 spilled
    second, written = run_barrier(
        tmp_path, 2, first.pending, rows(100, 30), ms_per_chunk=50, merge_below=1 << 30
    )
    assert values(written) == list(range(20, 40))
    (merged,) = second.pending
    assert isinstance(merged, FileChannelState) and merged.barrier_id == 2
    assert values(read_all(merged).to_batches()) == list(range(40, 130))
    assert second.stats.rows_merged == 60 and second.stats.rows_carried == 0
    assert second.stats.rows_spilled == 30
    third, written3 = run_barrier(tmp_path, 3, second.pending, rows(130, 0), ms_per_chunk=0)
    assert values(written3) == list(range(40, 130)) and third.pending == ()


def test_a_task_never_holds_more_pending_files_than_the_bound(tmp_path: Path) -> None:
    """Sustained backpressure: every barrier cuts after one chunk and adds a spill. Large state
    stays by reference, but never more than 'channelStateMaxFiles' refs per task; replay order
    holds across the merges."""
    pending: tuple = ()
    seen: list[int] = []
    next_row = 0
    for batch_id in range(1, 15):
        outcome, written = run_barrier(
            tmp_path, batch_id, pending, rows(next_row, 25), ms_per_chunk=1000, max_files=3
        )
        next_row += 25
        seen += values(written)
        pending = outcome.pending
        assert len(pending) <= 3, f"barrier {batch_id}: {len(pending)} refs"
    drained, rest = run_barrier(tmp_path, 99, pending, rows(next_row, 0), ms_per_chunk=0)
    assert drained.pending == ()
    assert seen + values(rest) == list(range(next_row))


def test_every_barrier_makes_progress_even_past_its_deadline(tmp_path: Path) -> None:
    first, _ = run_barrier(tmp_path, 1, (), rows(0, 50), ms_per_chunk=1000)
    assert first.stats.rows_written == 10  # one chunk, then the cut
    pending = first.pending
    seen: list[int] = list(range(10))
    for batch_id in range(2, 10):
        outcome, written = run_barrier(tmp_path, batch_id, pending, rows(0, 0), ms_per_chunk=1000)
        seen += values(written)
        pending = outcome.pending
        if not pending:
            break
    assert seen == list(range(50))


def test_small_state_goes_inline(tmp_path: Path) -> None:
    outcome, _ = run_barrier(tmp_path, 1, (), rows(0, 20), ms_per_chunk=200, inline=1 << 20)
    (state,) = outcome.pending
    assert isinstance(state, InlineChannelState)
    assert outcome.stats.state_inline_bytes > 0 and outcome.stats.state_file_bytes == 0
    assert values(read_all(state).to_batches()) == list(range(10, 20))


def test_pending_state_above_max_inflight_bytes_disables_the_cut(tmp_path: Path) -> None:
    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=50)
    second, written = run_barrier(
        tmp_path, 2, first.pending, rows(100, 50), ms_per_chunk=50, max_inflight_bytes=10
    )
    assert not second.stats.cut and second.pending == ()
    assert values(written) == list(range(20, 150))


def test_corrupt_inherited_state_stops_the_task(tmp_path: Path) -> None:
    from unaligned.errors import ChannelStateError

    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=50)
    (state,) = first.pending
    assert isinstance(state, FileChannelState)
    data = Path(state.path).read_bytes()
    Path(state.path).write_bytes(data[: len(data) // 2])
    with pytest.raises(ChannelStateError, match="barrier"):
        run_barrier(tmp_path, 2, first.pending, rows(100, 10), ms_per_chunk=1)


# --- issue 8: attempts sharing a file name, queries sharing a path, changed input columns -------


def test_state_goes_to_the_querys_own_directory(tmp_path: Path) -> None:
    outcome, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=25, query_id="q-42")
    (state,) = outcome.pending
    assert isinstance(state, FileChannelState)
    assert Path(state.path).parent == tmp_path / "state" / "q-42" / "barrier-1"


def test_another_attempt_of_the_task_never_replaces_the_committed_state(tmp_path: Path) -> None:
    """A speculative copy, or a zombie of a failed stage or of an earlier run (whose Spark
    taskAttemptId may even be the same), cuts at the same barrier after the committed attempt
    finished: the committed attempt's ref still replays its own rows."""
    committed, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=25, attempt_id="7")
    speculative, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=50, attempt_id="8")
    zombie, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=20, attempt_id="7")
    refs = [ref for o in (committed, speculative, zombie) for ref in o.pending]
    assert refs and all(isinstance(ref, FileChannelState) for ref in refs)
    assert len({ref.path for ref in refs if isinstance(ref, FileChannelState)}) == 3
    _, written = run_barrier(tmp_path, 2, committed.pending, rows(100, 10), ms_per_chunk=1)
    assert values(written) == list(range(40, 110))


def test_replay_maps_reordered_input_columns_by_name(tmp_path: Path) -> None:
    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=25)  # (key, value)
    swapped = pa.schema([SCHEMA.field("value"), SCHEMA.field("key")])
    new_input = (batch.select(["value", "key"]) for batch in rows(100, 20))
    _, written = run_barrier(tmp_path, 2, first.pending, new_input, ms_per_chunk=1)
    assert written and all(chunk.schema.equals(swapped) for chunk in written)  # read by position
    assert values(written) == list(range(40, 120))
    keys = [k for chunk in written for k in chunk.column(1).to_pylist()]
    assert keys == [f"k{i % 3}".encode() for i in range(40, 120)]


def test_replay_without_input_takes_the_declared_input_schema(tmp_path: Path) -> None:
    """An idle barrier: no input batch to take the schema from."""
    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=25)
    swapped = pa.schema([SCHEMA.field("value"), SCHEMA.field("key")])
    _, written = run_barrier(
        tmp_path, 2, first.pending, rows(0, 0), ms_per_chunk=1, input_schema=swapped
    )
    assert written and all(chunk.schema.equals(swapped) for chunk in written)
    assert values(written) == list(range(40, 100))


def test_an_incompatible_input_change_stops_before_anything_is_written(tmp_path: Path) -> None:
    from unaligned.errors import SchemaMismatchError

    first, _ = run_barrier(tmp_path, 1, (), rows(0, 100), ms_per_chunk=25)
    grown = SCHEMA.append(pa.field("tenant", pa.string(), nullable=False))

    def new_input() -> Iterator[pa.RecordBatch]:
        for batch in rows(100, 10):
            yield batch.append_column(grown.field("tenant"), pa.array(["t"] * batch.num_rows))

    written: list[pa.RecordBatch] = []
    with pytest.raises(SchemaMismatchError, match="'tenant'.*non-nullable.*Way out"):
        barrier = Barrier(batch_id=2, start_ms=0, query_id="q1")
        BarrierAlignment(
            settings(tmp_path),
            barrier,
            Deadline(0, 10**12),
            task_index=0,
            attempt_number=0,
            attempt_id="9",
            inherited=first.pending,
        ).run(new_input(), written.append, lambda: 0.0)
    assert written == []


def test_arrow_input_schema_is_what_spark_hands_the_sink() -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
        TimestampType,
    )

    from unaligned.barriers.alignment import arrow_input_schema

    header = StructType().add("key", StringType(), False).add("value", BinaryType(), True)
    spark_schema = (
        StructType()
        .add("value", BinaryType(), False)
        .add("key", StringType(), True)
        .add("partition", IntegerType(), True)
        .add("ts", TimestampType(), True)
        .add("headers", ArrayType(header, containsNull=False), True)
    )
    # As a mapInArrow batch of this schema arrives (checked with pyspark 4.3.0, session time
    # zone Etc/UTC).
    element = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
    expected = pa.schema(
        [
            pa.field("value", pa.binary(), False),
            pa.field("key", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("ts", pa.timestamp("us", tz="Etc/UTC")),
            pa.field("headers", pa.list_(pa.field("element", element, False))),
        ]
    )
    assert arrow_input_schema(spark_schema, timezone="Etc/UTC").equals(expected)


def test_chunks_grow_while_the_deadline_is_far_and_the_cut_lands_within_one_chunk_rows(
    tmp_path: Path,
) -> None:
    # 1 ms a row, 1,000 ms timeout, chunkRows 10, input batches of 100 rows.
    clock = Clock(1_000_000)
    barrier = Barrier(batch_id=1, start_ms=1_000_000, query_id="q1")
    sizes: list[int] = []

    def write_chunk(chunk: pa.RecordBatch) -> None:
        sizes.append(chunk.num_rows)
        clock.now += chunk.num_rows

    alignment = BarrierAlignment(
        settings(tmp_path, timeout_ms=1_000, chunk_rows=10),
        barrier,
        Deadline(barrier.start_ms, 1_000, clock),
        task_index=0,
        attempt_number=0,
        attempt_id="a1",
        inherited=(),
    )
    outcome = alignment.run(rows(0, 2_000, per_batch=100), write_chunk, clock)
    assert sizes[:5] == [10, 20, 40, 30, 80]  # chunkRows first, then doubling (slow start)
    assert max(sizes) == 100 and sizes[-1] <= 10  # whole batches, chunkRows near the end
    written = sum(sizes)
    assert 1_000 <= written <= 1_010  # the cut: at most one chunkRows chunk past the deadline
    assert outcome.stats.cut and outcome.stats.rows_spilled == 2_000 - written


def test_the_merge_plan_takes_all_small_state_or_just_enough_large_state() -> None:
    from unaligned.barriers.alignment import merge_plan
    from unaligned.channel_state.refs import InlineChannelState

    def ref(barrier: int, size: int) -> InlineChannelState:
        return InlineChannelState(
            barrier_id=barrier,
            task_index=0,
            query_id="q",
            write_id="w",
            row_count=10,
            byte_size=size,
            crc32=0,
            inline_avro=b"",
        )

    small = [ref(b, 100) for b in range(5)]
    assert merge_plan(small, max_files=8, merge_below_bytes=1_000) == 5  # all: 500 < 1,000
    large = [ref(b, 10_000) for b in range(5)]
    assert merge_plan(large, max_files=8, merge_below_bytes=1_000) == 0  # room: by reference
    assert merge_plan(large, max_files=3, merge_below_bytes=1_000) == 3  # keep 2 + the new one
    assert merge_plan([], max_files=1, merge_below_bytes=1_000) == 0
