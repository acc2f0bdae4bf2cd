"""The 2PC protocol core, without Spark or a broker: a stand-in TaskContext, the file
participant on a local directory, and a recording participant for the call sequence.

Decide / roll forward / recover on their own: test_recovery.py; the Kafka sink's input
columns: test_kafka_columns.py; its transactional ids: test_stream_writer_factory.py and
test_kafka_participant.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from task_context import FakeTaskContext
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError, TransactionExpiredError
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.files.committed_files import read_committed_files
from unaligned.sink.files.file_manifest import STAGING_DIR
from unaligned.sink.participant import SinkCommitMessage, TaskOutcome
from unaligned.sink.recovery import recover
from unaligned.sink.stream_writer_factory import build_stream_writer
from unaligned.sink.two_phase_commit import TwoPhaseCommitWriter
from unaligned.sink.writer_role import COMMIT_RUNNER_MODULE, PLANNER_MODULE

SCHEMA = StructType([StructField("id", LongType(), False), StructField("s", StringType(), True)])


# --- a frame that looks like a Spark worker module -----------------------------------------------


def _call_in_module(module_name: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` from a frame whose globals look like module ``module_name``."""
    namespace: dict[str, Any] = {"__name__": module_name, "fn": fn}
    exec("def call():\n    return fn()\n", namespace)
    return namespace["call"]()


def write_spark_checkpoint(checkpoint: Path, batches: int = 10) -> None:
    """What Spark writes before a batch runs: the query metadata and an offset log entry
    (a batch start time the sink's barrier reads)."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text('{"id":"q-1"}')
    for batch_id in range(batches):
        metadata = {"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000), "conf": {}}
        source = {"offsets": {}, "idleBarrier": 0}
        lines = ["v1", *(json.dumps(doc, separators=(",", ":")) for doc in (metadata, source))]
        (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines))


@pytest.fixture
def task_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., None]:
    import pyspark

    write_spark_checkpoint(tmp_path / "ck")

    def set_context(batch_id: int, partition_id: int, attempt: int = 0) -> None:
        context = FakeTaskContext(batch_id, partition_id, attempt)
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: context))

    return set_context


def _batches(start: int, rows: int, per_batch: int = 7) -> Iterator[pa.RecordBatch]:
    for offset in range(start, start + rows, per_batch):
        ids = list(range(offset, min(offset + per_batch, start + rows)))
        yield pa.record_batch(
            [pa.array(ids, pa.int64()), pa.array([f"r{i}" for i in ids])],
            schema=pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())]),
        )


def _file_writer(tmp_path: Path, **extra: str) -> TwoPhaseCommitWriter:
    options = {
        "checkpointlocation": str(tmp_path / "ck"),
        "path": str(tmp_path / "out"),
        "chunkrows": "5",
        **extra,
    }
    return build_stream_writer(options, SCHEMA)


def _write(
    writer: TwoPhaseCommitWriter,
    set_context: Callable[..., None],
    batch_id: int,
    partition_id: int,
    start: int,
    rows: int,
    attempt: int = 0,
) -> SinkCommitMessage:
    set_context(batch_id, partition_id, attempt)
    return writer.write(_batches(start, rows))


def _ids(tmp_path: Path) -> list[int]:
    table = read_committed_files(str(tmp_path / "out"))
    return sorted(table.column("id").to_pylist()) if table.num_columns else []


def _staging_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "out" / STAGING_DIR).rglob("*") if p.is_file()]


# --- the protocol with the file participant ------------------------------------------------------


def test_write_commit_read_back(tmp_path: Path, task_context: Callable[..., None]) -> None:
    writer = _file_writer(tmp_path)
    m0 = _write(writer, task_context, 0, 0, 0, 23)
    m1 = _write(writer, task_context, 0, 1, 100, 0)
    assert m0.outcome is TaskOutcome.PREPARED and m0.rows == 23
    assert m1.outcome is TaskOutcome.EMPTY and m1.prepared is None
    assert _ids(tmp_path) == []  # prepared is invisible
    # Spark builds a new writer in a new process for commit.
    _file_writer(tmp_path).commit([m0, m1], 0)
    assert _ids(tmp_path) == list(range(23))
    assert _staging_files(tmp_path) == []
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    assert log.is_done(0) and log.unfinished_batch_ids() == []


def test_a_small_batch_is_decided_and_committed_as_one_file(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path, mergefilesbelow="1MB")
    messages = [_write(writer, task_context, 0, p, 100 * p, 12) for p in (1, 0)]
    _file_writer(tmp_path, mergefilesbelow="1MB").commit(messages, 0)
    record = CommitLog(Checkpoint.resolve(str(tmp_path / "ck"))).read(0)
    assert record is not None and len(record.prepared) == 1
    table = read_committed_files(str(tmp_path / "out"))
    assert table.column("id").to_pylist() == [*range(12), *range(100, 112)]  # partition order
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 1
    assert _staging_files(tmp_path) == []


def test_empty_task_opens_nothing(tmp_path: Path, task_context: Callable[..., None]) -> None:
    writer = _file_writer(tmp_path)
    message = _write(writer, task_context, 0, 3, 0, 0)
    assert message.outcome is TaskOutcome.EMPTY
    assert not (tmp_path / "out" / STAGING_DIR).exists()


def test_replayed_decided_batch_opens_nothing_and_rolls_forward(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path)
    m0 = _write(writer, task_context, 4, 0, 0, 10)
    m1 = _write(writer, task_context, 4, 1, 10, 10)
    # As if the driver crashed right after writing the commit record.
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    log.write(CommitRecord(4, "files", (m0.prepared, m1.prepared), 0))  # type: ignore[arg-type]
    staged_before = sorted(_staging_files(tmp_path))
    # Spark replays batch 4: the tasks find the record, consume their input, open nothing.
    r0 = _write(writer, task_context, 4, 0, 0, 10, attempt=0)
    assert r0.outcome is TaskOutcome.ALREADY_DECIDED and r0.rows == 10
    assert sorted(_staging_files(tmp_path)) == staged_before
    _file_writer(tmp_path).commit([r0, _write(writer, task_context, 4, 1, 10, 10)], 4)
    assert _ids(tmp_path) == list(range(20))
    assert _staging_files(tmp_path) == []


def test_recovery_runs_only_when_spark_plans(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path)
    _write(writer, task_context, 0, 0, 0, 10)  # prepared, never decided
    assert _staging_files(tmp_path)
    _call_in_module(COMMIT_RUNNER_MODULE, lambda: _file_writer(tmp_path))
    assert _staging_files(tmp_path), "a commit process must never run recovery"
    _call_in_module(PLANNER_MODULE, lambda: _file_writer(tmp_path))
    assert _staging_files(tmp_path) == []


def test_abort_removes_what_messages_prepared(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path)
    messages = [_write(writer, task_context, 0, p, p * 10, 10) for p in range(2)]
    _file_writer(tmp_path).abort([messages[0], None], 0)
    assert _staging_files(tmp_path) == []
    assert _ids(tmp_path) == []


def test_abort_never_touches_a_decided_batch(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path)
    messages = [_write(writer, task_context, 0, p, p * 10, 10) for p in range(2)]
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    log.write(CommitRecord(0, "files", tuple(m.prepared for m in messages), 0))  # type: ignore[misc]
    _file_writer(tmp_path).abort(messages, 0)  # e.g. Spark aborts after a failed commit()
    assert len(_staging_files(tmp_path)) == 2
    recover(log, writer.participant)
    assert _ids(tmp_path) == list(range(20))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda ms: ms[:1] + [None], "NoneType"),
        (lambda ms: ms + ms[:1], "two commit messages for partition 0"),
    ],
)
def test_commit_refuses_incomplete_messages(
    tmp_path: Path,
    task_context: Callable[..., None],
    mutate: Callable[[list[Any]], list[Any]],
    match: str,
) -> None:
    writer = _file_writer(tmp_path)
    messages = [_write(writer, task_context, 0, p, p * 10, 10) for p in range(2)]
    with pytest.raises(CommitLogError, match=match):
        _file_writer(tmp_path).commit(mutate(messages), 0)
    assert CommitLog(Checkpoint.resolve(str(tmp_path / "ck"))).read(0) is None


def test_commit_refuses_message_of_another_batch(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path)
    message = _write(writer, task_context, 3, 0, 0, 10)
    with pytest.raises(CommitLogError, match="message of batch 3"):
        _file_writer(tmp_path).commit([message], 4)


def test_commit_rolls_forward_earlier_unfinished_batches(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    writer = _file_writer(tmp_path)
    first = _write(writer, task_context, 0, 0, 0, 10)
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    log.write(CommitRecord(0, "files", (first.prepared,), 0))  # type: ignore[arg-type]
    second = _write(writer, task_context, 1, 0, 10, 10)
    _file_writer(tmp_path).commit([second], 1)  # no recovery ran in between
    assert _ids(tmp_path) == list(range(20))


def test_record_of_other_participant_is_refused(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    log.write(CommitRecord(0, "kafka", (), 0))
    writer = _file_writer(tmp_path)
    message = _write(writer, task_context, 0, 0, 0, 5)
    with pytest.raises(CommitLogError, match="'kafka' sink"):
        _file_writer(tmp_path).commit([message], 0)


def test_pruning_keeps_min_batches(tmp_path: Path, task_context: Callable[..., None]) -> None:
    writer = _file_writer(tmp_path, minbatchestoretain="2")
    for b in range(5):
        _file_writer(tmp_path, minbatchestoretain="2").commit(
            [_write(writer, task_context, b, 0, b * 10, 10)], b
        )
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    assert log.decided_batch_ids() == [3, 4]
    assert _ids(tmp_path) == list(range(50))  # manifests are never pruned


# --- call sequence with a recording participant --------------------------------------------------


class RecordingTask:
    def __init__(self, calls: list[str], fail_after_chunks: int | None) -> None:
        self.calls = calls
        self.chunks: list[int] = []
        self.fail_after_chunks = fail_after_chunks

    def write_chunk(self, chunk: pa.RecordBatch) -> None:
        self.chunks.append(chunk.num_rows)
        self.calls.append(f"chunk:{chunk.num_rows}")
        if self.fail_after_chunks is not None and len(self.chunks) >= self.fail_after_chunks:
            raise RuntimeError("send failed")

    def between_chunks(self) -> None:
        self.calls.append("between")

    def prepare(self) -> dict[str, Any]:
        self.calls.append("prepare")
        return {"id": "t", "partition": 0, "rows": sum(self.chunks)}

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.calls.append("close")


class RecordingParticipant:
    kind = "files"

    def __init__(
        self, fail_after_chunks: int | None = None, warm_up: Callable[[], None] | None = None
    ) -> None:
        self.calls: list[str] = []
        self.fail_after_chunks = fail_after_chunks
        self.undecidable = False
        self.warm_ups: list[str] = []
        """``started`` and ``ended`` of each warm-up, apart from :attr:`calls` (another thread)."""
        self.warmed_at_open: list[bool] = []
        self._warm_up_work = warm_up

    def check_at_query_start(self) -> None:
        self.calls.append("check")

    def warm_up(self) -> None:
        self.warm_ups.append("started")
        if self._warm_up_work is not None:
            self._warm_up_work()
        self.warm_ups.append("ended")

    def open_task(self, batch_id: int, partition_id: int, attempt_number: int) -> RecordingTask:
        self.warmed_at_open.append(self.warm_ups[-1:] == ["ended"])
        self.calls.append(f"open:{batch_id}-{partition_id}-{attempt_number}")
        return RecordingTask(self.calls, self.fail_after_chunks)

    def commit(
        self, items: Sequence[Mapping[str, Any]], batch_id: int, progress: Callable[[int], None]
    ) -> None:
        self.calls.append(f"commit:{batch_id}:{len(items)}")

    def consolidate(
        self, items: Sequence[Mapping[str, Any]], batch_id: int
    ) -> list[Mapping[str, Any]]:
        return list(items)

    def check_decidable(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        self.calls.append(f"check:{batch_id}:{len(items)}")
        if self.undecidable:
            raise TransactionExpiredError(f"batch {batch_id}: cannot commit")

    def finish_batch(self, record: CommitRecord) -> None:
        self.calls.append(f"finish:{record.batch_id}")

    def abort(self, items: Sequence[Mapping[str, Any]], batch_id: int) -> None:
        self.calls.append(f"abort:{batch_id}:{len(items)}")

    def clean_up(self, log: CommitLog, up_to_batch: int | None) -> int:
        self.calls.append(f"clean:{up_to_batch}")
        return 0

    def describe(self, item: Mapping[str, Any]) -> str:
        return str(item)

    def item_key(self, item: Mapping[str, Any]) -> str:
        return str(item["id"])


def _recording_writer(
    tmp_path: Path, participant: RecordingParticipant, chunk_rows: int = 3
) -> TwoPhaseCommitWriter:
    from unaligned.sink.options import SinkOptions

    options = SinkOptions.parse(
        {
            "checkpointlocation": str(tmp_path / "ck"),
            "path": str(tmp_path / "o"),
            "chunkrows": str(chunk_rows),
        }
    )
    return TwoPhaseCommitWriter(options, participant)  # type: ignore[arg-type]


def test_rows_are_written_in_chunks_with_a_check_between(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    # No barrier file, so no source emits idle barriers and the task cannot cut: each input
    # batch is one chunk (unaligned.barriers.chunking), with the producer check after it.
    participant = RecordingParticipant()
    writer = _recording_writer(tmp_path, participant, chunk_rows=3)
    task_context(0, 0)
    writer.write(_batches(0, 10, per_batch=7))  # batches of 7 and 3 rows
    assert participant.calls == [
        "open:0-0-0",
        "chunk:7",
        "between",
        "chunk:3",
        "between",
        "prepare",
        "close",
    ]


def test_failed_write_aborts_its_transaction(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    participant = RecordingParticipant(fail_after_chunks=2)
    writer = _recording_writer(tmp_path, participant)
    task_context(0, 0)
    with pytest.raises(RuntimeError, match="send failed"):
        writer.write(_batches(0, 10))
    assert participant.calls[-2:] == ["abort", "close"]
    assert "prepare" not in participant.calls


def test_commit_sequence_decide_commit_finish_done_clean(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    participant = RecordingParticipant()
    writer = _recording_writer(tmp_path, participant)
    task_context(2, 0)
    message = writer.write(_batches(0, 4))
    participant.calls.clear()
    writer.commit([message], 2)
    assert participant.calls == ["check:2:1", "commit:2:1", "finish:2", "clean:2"]
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    assert log.read(2) is not None and log.is_done(2)
    # Spark calls commit again for the same batch after a restart: nothing is committed twice.
    participant.calls.clear()
    writer.commit([message], 2)
    assert participant.calls == ["clean:2"]


def test_a_batch_that_cannot_commit_is_never_decided(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    """Scenario 1 (issue 8): the check runs before the commit record; when it refuses, no
    record is written, so a restart runs the batch again instead of failing forever."""
    participant = RecordingParticipant()
    participant.undecidable = True
    writer = _recording_writer(tmp_path, participant)
    task_context(2, 0)
    message = writer.write(_batches(0, 4))
    participant.calls.clear()
    with pytest.raises(TransactionExpiredError):
        writer.commit([message], 2)
    assert participant.calls == ["check:2:1"]
    assert CommitLog(Checkpoint.resolve(str(tmp_path / "ck"))).read(2) is None


def test_an_attempt_whose_batch_was_decided_meanwhile_opens_nothing(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    """Scenario 11 (issue 8): a zombie attempt that started before the decision checks again
    right before it opens a transaction, so it cannot fence a later batch's id."""
    participant = RecordingParticipant()
    writer = _recording_writer(tmp_path, participant)
    task_context(2, 0)
    first = writer.write(_batches(0, 4))
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))

    def input_arriving_after_the_decision() -> Iterator[pa.RecordBatch]:
        writer.commit([first], 2)
        yield from _batches(0, 4)

    participant.calls.clear()
    task_context(2, 0, attempt=1)
    zombie = writer.write(input_arriving_after_the_decision())
    assert log.is_done(2)
    assert zombie.outcome is TaskOutcome.ALREADY_DECIDED and zombie.prepared is None
    assert not any(call.startswith("open:") for call in participant.calls)


def test_the_warm_up_runs_while_the_first_rows_are_on_their_way_and_ends_before_the_open(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    """Step 1b: the process warms up on a thread while the input's first rows are awaited, and
    the transaction opens only once the warm-up has ended."""
    arrived = threading.Event()
    participant = RecordingParticipant(warm_up=lambda: arrived.wait(5))
    writer = _recording_writer(tmp_path, participant)
    task_context(0, 0)

    def slow_input() -> Iterator[pa.RecordBatch]:
        time.sleep(0.05)
        assert participant.warm_ups == ["started"]  # awaiting the rows and warming, together
        arrived.set()
        yield from _batches(0, 4)

    message = writer.write(slow_input())
    assert message.outcome is TaskOutcome.PREPARED
    assert participant.warm_ups == ["started", "ended"]
    assert participant.warmed_at_open == [True]


def test_an_empty_task_returns_after_its_warm_up_and_a_failed_warm_up_fails_nothing(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    def slow() -> None:
        time.sleep(0.1)

    quiet = RecordingParticipant(warm_up=slow)
    task_context(0, 0)
    empty = _recording_writer(tmp_path, quiet).write(iter(()))
    assert empty.outcome is TaskOutcome.EMPTY
    assert quiet.warm_ups == ["started", "ended"]  # no thread outlives its task

    def broken() -> None:
        raise ConnectionError("broker away")

    failing = RecordingParticipant(warm_up=broken)
    task_context(1, 0)
    message = _recording_writer(tmp_path, failing).write(_batches(0, 4))
    assert message.outcome is TaskOutcome.PREPARED
    assert failing.warm_ups == ["started"] and "prepare" in failing.calls


def test_a_replayed_decided_batch_warms_nothing_up(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    participant = RecordingParticipant()
    writer = _recording_writer(tmp_path, participant)
    task_context(2, 0)
    writer.commit([writer.write(_batches(0, 4))], 2)
    participant.warm_ups.clear()
    task_context(2, 0, attempt=1)
    replayed = writer.write(_batches(0, 4))
    assert replayed.outcome is TaskOutcome.ALREADY_DECIDED
    assert participant.warm_ups == []


def test_new_messages_for_a_decided_batch_are_aborted(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    participant = RecordingParticipant()
    writer = _recording_writer(tmp_path, participant)
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    log.write(CommitRecord(5, "files", ({"id": "old", "partition": 0},), 0))
    stray = SinkCommitMessage(5, 0, 1, 4, TaskOutcome.PREPARED, {"id": "new", "partition": 0})
    writer.commit([stray], 5)
    assert participant.calls == ["abort:5:1", "commit:5:1", "finish:5", "clean:5"]


# --- the writer Spark pickles and keeps running -------------------------------------------------


def test_writer_is_picklable(tmp_path: Path) -> None:
    import pickle

    write_spark_checkpoint(tmp_path / "ck")
    writer = _file_writer(tmp_path)
    clone = pickle.loads(pickle.dumps(writer))
    assert isinstance(clone, TwoPhaseCommitWriter)


def test_everything_the_sink_keeps_per_batch_is_bounded(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    """Issue 8 scenario 10: commit records, done markers and metrics stay at most
    minBatchesToRetain (plus one round of metrics) however many batches run."""
    write_spark_checkpoint(tmp_path / "ck", batches=12)
    writer = _file_writer(tmp_path, minbatchestoretain="3")
    for batch in range(12):
        message = _write(writer, task_context, batch, 0, batch * 10, 10)
        _file_writer(tmp_path, minbatchestoretain="3").commit([message], batch)
    checkpoint = tmp_path / "ck" / "unaligned"
    assert len(list((checkpoint / "commits").glob("*.json"))) <= 3
    assert len(list((checkpoint / "done").glob("*.json"))) <= 3
    assert 0 < len(list((checkpoint / "metrics").glob("*.json"))) <= 2 * 3
    assert _ids(tmp_path) == list(range(120))


def _offsets_with(checkpoint: Path, batch_id: int, source: dict[str, Any]) -> None:
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000), "conf": {}}
    lines = ["v1", *(json.dumps(doc, separators=(",", ":")) for doc in (metadata, source))]
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines))


@pytest.mark.parametrize("end_of_data", [False, True])
def test_the_final_checkpoint_never_cuts_and_marks_the_query_finished(
    tmp_path: Path, task_context: Callable[..., None], end_of_data: bool
) -> None:
    """Issue 9: a batch whose source offset says endOfData writes every row (no channel state
    even past the deadline) and, committed with nothing pending, finishes the query."""
    from unaligned.finishing import finished_batch

    source: dict[str, Any] = {"offsets": {}, "idleBarrier": 0, "barrierToken": "tok"}
    if end_of_data:
        source["endOfData"] = True
    _offsets_with(tmp_path / "ck", 0, source)
    extra = {"checkpointmode": "unaligned", "alignedcheckpointtimeout": "0s"}
    writer = _file_writer(tmp_path, **extra)
    message = _write(writer, task_context, 0, 0, 0, 40)
    assert bool(message.pending) is not end_of_data
    _file_writer(tmp_path, **extra).commit([message], 0)
    assert finished_batch(Checkpoint.resolve(str(tmp_path / "ck"))) == (0 if end_of_data else None)
    written = _ids(tmp_path)
    if end_of_data:
        assert written == list(range(40))
    else:
        assert len(written) < 40  # cut: the rest is channel state for the next barrier


def test_a_layout_drain_never_cuts_and_a_refused_layout_decides_nothing(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    """A source's layout drain (``layoutDrain``: its task layout changes next batch) writes
    every row past the deadline, like the final checkpoint, but does not finish the query. A
    batch whose sink task count cannot take the state pending before it is not decided."""
    from unaligned.errors import PendingStateLayoutError
    from unaligned.finishing import finished_batch

    extra = {"checkpointmode": "unaligned", "alignedcheckpointtimeout": "0s"}
    source: dict[str, Any] = {"offsets": {}, "idleBarrier": 0, "barrierToken": "tok"}
    _offsets_with(tmp_path / "ck", 0, source)
    cut = _write(_file_writer(tmp_path, **extra), task_context, 0, 1, 0, 40)
    assert cut.pending, "an ordinary barrier past its deadline cuts"
    _file_writer(tmp_path, **extra).commit(
        [_write(_file_writer(tmp_path, **extra), task_context, 0, 0, 100, 0), cut], 0
    )
    # batch 1 runs with one sink task: task 1's pending state has no task to replay it
    _offsets_with(tmp_path / "ck", 1, source)
    lone = _write(_file_writer(tmp_path, **extra), task_context, 1, 0, 200, 10)
    with pytest.raises(PendingStateLayoutError, match="sink task"):
        _file_writer(tmp_path, **extra).commit([lone], 1)
    log = CommitLog(Checkpoint.resolve(str(tmp_path / "ck")))
    assert log.read(1) is None, "nothing decided"
    # the layout drain at the old count: task 1 replays everything and cuts nothing
    _offsets_with(tmp_path / "ck", 1, {**source, "idleBarrier": 1, "layoutDrain": True})
    drained = [_write(_file_writer(tmp_path, **extra), task_context, 1, i, 0, 0) for i in range(2)]
    assert not any(m.pending for m in drained)
    _file_writer(tmp_path, **extra).commit(drained, 1)
    record = log.read(1)
    assert record is not None and record.channel_state == {} and record.task_count == 2
    assert finished_batch(Checkpoint.resolve(str(tmp_path / "ck"))) is None
    assert sorted(_ids(tmp_path)) == list(range(40))


def test_a_source_that_splits_its_ranges_has_its_pending_state_moved_not_refused(
    tmp_path: Path, task_context: Callable[..., None]
) -> None:
    """``minPartitions`` changes the task count with every batch (``splitRanges`` in the
    offset): order across barriers is not kept with it anyway, so pending state of a vanished
    task is moved to ``index mod n``, as before, instead of stopping the query."""
    extra = {"checkpointmode": "unaligned", "alignedcheckpointtimeout": "0s"}
    source: dict[str, Any] = {
        "offsets": {},
        "idleBarrier": 0,
        "barrierToken": "tok",
        "splitRanges": True,
    }
    _offsets_with(tmp_path / "ck", 0, source)
    first = [
        _write(_file_writer(tmp_path, **extra), task_context, 0, i, 100 * i, 40) for i in (0, 1)
    ]
    assert first[1].pending
    _file_writer(tmp_path, **extra).commit(first, 0)
    _offsets_with(tmp_path / "ck", 1, {**source, "idleBarrier": 1})
    aligned = {"checkpointmode": "aligned"}
    lone = _write(_file_writer(tmp_path, **aligned), task_context, 1, 0, 500, 0)
    _file_writer(tmp_path, **aligned).commit([lone], 1)
    record = CommitLog(Checkpoint.resolve(str(tmp_path / "ck"))).read(1)
    assert record is not None and 0 in record.channel_state and record.task_count == 1
