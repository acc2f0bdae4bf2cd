"""What users call: ``await_finished`` and ``stop``, against a checkpoint that a thread fills
in the way Spark, the sink and the source would."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.checkpoint import Checkpoint
from unaligned.errors import NotACheckpointError, QueryNotRunningError, StopTimeoutError
from unaligned.finishing import waiting
from unaligned.finishing.final_checkpoint import mark_finished
from unaligned.finishing.heartbeat import write_heartbeat
from unaligned.finishing.stop_request import (
    linked_location,
    mark_honoured,
    read_request,
    request_stop,
)
from unaligned.finishing.waiting import (
    await_finished,
    barrier_token,
    stop,
    stop_from_elsewhere,
    wait_for_stop,
)

TOKEN = "tok"


class FakeQuery:
    def __init__(self) -> None:
        self.isActive = True
        self.stopped = False
        self.lastProgress: dict[str, object] | None = None
        self.status = {"message": "Initializing sources"}
        self.failure: Exception | None = None

    def stop(self) -> None:
        self.stopped = True
        self.isActive = False

    def fail(self, failure: Exception) -> None:
        self.failure = failure
        self.isActive = False

    def awaitTermination(self) -> None:
        if self.failure is not None:
            raise self.failure


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(HINT_DIR_ENV, str(tmp_path / "hints"))
    root = tmp_path / "ck"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q"}')
    return root


def plan(root: Path, batch: int, token: str | None = TOKEN) -> None:
    offset = {"offsets": {"t": {"0": batch}}, "idleBarrier": 0}
    if token is not None:
        offset["barrierToken"] = token
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1}), json.dumps(offset)]
    (root / "offsets" / str(batch)).write_text("\n".join(lines))


def commit(root: Path, batch: int) -> None:
    (root / "commits" / str(batch)).write_text("v1\n{}")


# A failure in a background step fails the test instead of becoming a warning (pyproject's
# filterwarnings; the steps also record what they see for the test body to assert).


def in_background(steps: Callable[[], None]) -> threading.Thread:
    worker = threading.Thread(target=steps)
    worker.start()
    return worker


def test_await_finished_stops_the_query_once_spark_committed_the_final_batch(
    checkpoint: Path,
) -> None:
    query = FakeQuery()
    plan(checkpoint, 4)

    query.lastProgress = {"batchId": 4}
    stopped_early: list[bool] = []  # seen by the background steps, asserted here

    def finish_later() -> None:
        time.sleep(0.3)
        mark_finished(Checkpoint.resolve(str(checkpoint)), 4)
        time.sleep(0.3)
        stopped_early.append(query.stopped)  # the sink is done, Spark has not recorded it yet
        commit(checkpoint, 4)

    worker = in_background(finish_later)
    assert await_finished(query, str(checkpoint), timeout_s=30)
    worker.join()
    assert stopped_early == [False]
    assert query.stopped


def test_await_finished_waits_for_the_first_trigger_of_a_run_before_trusting_the_marker(
    checkpoint: Path,
) -> None:
    plan(checkpoint, 4)
    commit(checkpoint, 4)
    mark_finished(
        Checkpoint.resolve(str(checkpoint)), 4
    )  # an earlier run's drain: this run may read on
    query = FakeQuery()
    assert not await_finished(query, str(checkpoint), timeout_s=0.4)
    query.status = {"message": "Waiting for data to arrive"}  # the source planned no batch
    assert await_finished(query, str(checkpoint), timeout_s=5) and query.stopped


def test_await_finished_times_out_and_leaves_the_query_running(checkpoint: Path) -> None:
    query = FakeQuery()
    assert not await_finished(query, str(checkpoint), timeout_s=0.3)
    assert query.isActive and not query.stopped


def test_await_finished_honours_a_stop_from_elsewhere_but_not_an_earlier_runs(
    checkpoint: Path,
) -> None:
    plan(checkpoint, 0)
    commit(checkpoint, 0)
    earlier = mark_honoured(
        Checkpoint.resolve(str(checkpoint)),
        request_stop(Checkpoint.resolve(str(checkpoint)), False),
        "runBefore",
    )
    query = FakeQuery()
    assert not await_finished(query, str(checkpoint), timeout_s=0.5)
    assert read_request(Checkpoint.resolve(str(checkpoint))) == earlier and query.isActive

    def stop_from_cli() -> None:
        request = request_stop(Checkpoint.resolve(str(checkpoint)), drain=False)
        time.sleep(0.3)
        mark_honoured(
            Checkpoint.resolve(str(checkpoint)), request, "thisRun"
        )  # the source, at its barrier

    worker = in_background(stop_from_cli)
    assert await_finished(query, str(checkpoint), timeout_s=30)
    worker.join()
    assert query.stopped


@pytest.mark.parametrize("drain", [True, False])
def test_stop_returns_once_honoured_and_at_rest_and_withdraws_its_request(
    checkpoint: Path, drain: bool
) -> None:
    plan(checkpoint, 0)
    commit(checkpoint, 0)
    plan(checkpoint, 1)  # batch 1 runs while the stop is asked for
    query = FakeQuery()
    seen: list[tuple[str, object]] = []  # what the query side saw, asserted here

    def query_side() -> None:
        while (request := read_request(Checkpoint.resolve(str(checkpoint)))) is None:
            time.sleep(0.05)
        seen.append(("linked", linked_location(TOKEN)))  # the stopper linked it
        time.sleep(0.3)
        seen.append(("stopped before honoured", query.stopped))
        commit(checkpoint, 1)
        mark_honoured(Checkpoint.resolve(str(checkpoint)), request, "reader")
        if drain:
            time.sleep(0.3)
            # honoured, but the final checkpoint is still to come
            seen.append(("stopped before the final checkpoint", query.stopped))
            plan(checkpoint, 2)
            mark_finished(Checkpoint.resolve(str(checkpoint)), 2)
            commit(checkpoint, 2)

    worker = in_background(query_side)
    stop(query, str(checkpoint), drain=drain, timeout_s=30)
    worker.join()
    expected: list[tuple[str, object]] = [
        ("linked", str(checkpoint)),
        ("stopped before honoured", False),
    ]
    if drain:
        expected.append(("stopped before the final checkpoint", False))
    assert seen == expected
    assert query.stopped
    assert read_request(Checkpoint.resolve(str(checkpoint))) is None


def test_a_stop_that_is_not_honoured_in_time_says_what_it_waited_for(checkpoint: Path) -> None:
    plan(checkpoint, 0)
    request = request_stop(Checkpoint.resolve(str(checkpoint)), drain=True)
    with pytest.raises(StopTimeoutError, match="the query is running but no barrier") as raised:
        wait_for_stop(Checkpoint.resolve(str(checkpoint)), request, 0.3, lambda: True)
    assert "stop.json" in str(raised.value) and "withdraw" in str(raised.value)
    mark_honoured(Checkpoint.resolve(str(checkpoint)), request, "reader")
    with pytest.raises(StopTimeoutError, match="final checkpoint has not committed"):
        wait_for_stop(Checkpoint.resolve(str(checkpoint)), request, 0.3, lambda: True)
    assert read_request(Checkpoint.resolve(str(checkpoint))) is not None  # stays recorded


def test_stop_refuses_a_path_that_is_not_a_checkpoint_of_ours(checkpoint: Path) -> None:
    with pytest.raises(NotACheckpointError, match="no 'metadata' file"):
        stop(FakeQuery(), str(checkpoint / "nope"), timeout_s=1)
    assert (
        barrier_token(Checkpoint.resolve(str(checkpoint))) is None
    )  # started, no batch planned yet
    plan(checkpoint, 0, token=None)
    with pytest.raises(NotACheckpointError, match="carry no barrierToken"):
        barrier_token(Checkpoint.resolve(str(checkpoint)))
    plan(checkpoint, 1)
    assert barrier_token(Checkpoint.resolve(str(checkpoint))) == TOKEN


class TransformationFailed(Exception):
    pass


@pytest.mark.parametrize("failed", [True, False])
def test_stop_of_a_query_that_is_not_active_fails_at_once_and_requests_nothing(
    checkpoint: Path, failed: bool
) -> None:
    plan(checkpoint, 0)
    query = FakeQuery()
    if failed:
        query.fail(TransformationFailed("boom"))
        with pytest.raises(TransformationFailed, match="boom"):
            stop(query, str(checkpoint), drain=True, timeout_s=30)
    else:
        query.stop()
        with pytest.raises(QueryNotRunningError, match="the query is not active"):
            stop(query, str(checkpoint), drain=True, timeout_s=30)
    assert read_request(Checkpoint.resolve(str(checkpoint))) is None


@pytest.mark.parametrize("failed", [True, False])
def test_a_query_that_ends_during_the_drain_raises_and_keeps_the_request_for_its_next_run(
    checkpoint: Path, failed: bool
) -> None:
    plan(checkpoint, 0)
    query = FakeQuery()

    def honour_then_end() -> None:
        while (request := read_request(Checkpoint.resolve(str(checkpoint)))) is None:
            time.sleep(0.05)
        mark_honoured(Checkpoint.resolve(str(checkpoint)), request, "reader")
        time.sleep(0.3)
        if failed:
            query.fail(TransformationFailed("the transformation raised"))
        else:
            query.isActive = False  # stopped by someone else

    worker = in_background(honour_then_end)
    expected = TransformationFailed if failed else QueryNotRunningError
    with pytest.raises(expected) as raised:
        stop(query, str(checkpoint), drain=True, timeout_s=30)
    worker.join()
    if not failed:
        assert "the query ended after a barrier honoured it" in str(raised.value)
        assert "the next run from this checkpoint honours it" in str(raised.value)
    kept = read_request(Checkpoint.resolve(str(checkpoint)))
    assert kept is not None and kept.drain
    assert kept.honoured_by is None  # recorded again: the next run acts on it
    assert not query.stopped


@pytest.mark.parametrize("ended_s_ago", [60, 0])  # a run that ended long ago / just now
def test_cli_stop_of_a_query_not_running_says_so_within_seconds_and_withdraws(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, ended_s_ago: int
) -> None:
    monkeypatch.setattr(waiting, "STALE_S", 0.5)
    plan(checkpoint, 0)
    beat_at_ms = int(time.time() * 1000) - ended_s_ago * 1000  # the last beat of its last run
    (checkpoint / "unaligned").mkdir()
    (checkpoint / "unaligned" / "source-heartbeat.json").write_text(
        json.dumps({"barrierToken": TOKEN, "atMs": beat_at_ms})
    )
    lines: list[str] = []
    with pytest.raises(QueryNotRunningError) as raised:
        stop_from_elsewhere(
            Checkpoint.resolve(str(checkpoint)), True, 200, lines.append
        )  # not its 200 s timeout
    assert "the query is not running: its source's heartbeat" in str(raised.value)
    assert re.search(r"source-heartbeat\.json was last written \d+ s ago", str(raised.value))
    assert "the request was withdrawn" in str(raised.value)
    assert read_request(Checkpoint.resolve(str(checkpoint))) is None
    assert lines == ["stop requested (drain=True)"]


def test_cli_stop_of_a_running_query_waits_for_its_barrier(checkpoint: Path) -> None:
    plan(checkpoint, 0)
    commit(checkpoint, 0)
    lines: list[str] = []
    done = threading.Event()

    def running_source() -> None:
        beats = 0
        while not done.is_set():
            write_heartbeat(Checkpoint.resolve(str(checkpoint)), TOKEN)
            beats += 1
            request = read_request(Checkpoint.resolve(str(checkpoint)))
            if beats == 10 and request is not None:
                mark_honoured(Checkpoint.resolve(str(checkpoint)), request, "reader")
            time.sleep(0.1)

    worker = in_background(running_source)
    try:
        stop_from_elsewhere(Checkpoint.resolve(str(checkpoint)), False, 30, lines.append)
    finally:
        done.set()
        worker.join()
    assert lines == [
        "stop requested (drain=False)",
        "the query is running; waiting for its next barrier",
    ]
