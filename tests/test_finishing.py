"""The finishing protocol's pieces: EndOfData in the offset log, the finished marker, and
``await_finished`` stopping a query once its final checkpoint is committed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from unaligned.finishing import await_finished, end_of_data, finished_batch, mark_finished

TOKEN = {"barrierToken": "t"}


@pytest.mark.parametrize(
    "offsets, expected",
    [
        ([{**TOKEN, "endOfData": True}], True),
        ([{**TOKEN, "endOfData": True}, {**TOKEN, "endOfData": True}], True),
        ([{**TOKEN, "endOfData": True}, {**TOKEN}], False),  # one source still has data
        ([{**TOKEN}], False),
        ([{"endOfData": True}], False),  # not a format("unaligned") offset
        ([3, None, {**TOKEN, "endOfData": True}], True),  # other sources do not finish
        ([], False),
    ],
)
def test_end_of_data_needs_every_unaligned_source(offsets: list[object], expected: bool) -> None:
    assert end_of_data(offsets) is expected


def test_the_finished_marker_names_the_final_batch(tmp_path: Path) -> None:
    assert finished_batch(str(tmp_path)) is None
    mark_finished(str(tmp_path), 7)
    mark_finished(str(tmp_path), 7)  # idempotent (a roll-forward after a crash)
    assert finished_batch(str(tmp_path)) == 7


class FakeQuery:
    def __init__(self) -> None:
        self.isActive = True
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self.isActive = False

    def awaitTermination(self) -> None:
        return None


def test_await_finished_stops_the_query_once_spark_committed_the_final_batch(
    tmp_path: Path,
) -> None:
    query = FakeQuery()
    (tmp_path / "commits").mkdir()

    def finish_later() -> None:
        time.sleep(0.3)
        mark_finished(str(tmp_path), 4)
        time.sleep(0.3)
        assert not query.stopped  # the sink is done, but Spark has not recorded the batch yet
        (tmp_path / "commits" / "4").write_text("v1\n{}")

    worker = threading.Thread(target=finish_later)
    worker.start()
    assert await_finished(query, str(tmp_path), timeout_s=30)
    worker.join()
    assert query.stopped


def test_await_finished_times_out_and_leaves_the_query_running(tmp_path: Path) -> None:
    query = FakeQuery()
    assert not await_finished(query, str(tmp_path), timeout_s=0.3)
    assert query.isActive and not query.stopped
