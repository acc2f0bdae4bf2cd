"""The listener's figures: lag from the progress report, barrier figures the sink published."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from checkpoint_files import metrics
from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.barriers.metrics import BarrierMetrics, read_barrier, write_metrics
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.stop_request import link, query_key
from unaligned.monitoring.listener import QueryFigures, UnalignedListener, figures_of

QUERY = "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab"


@pytest.fixture(autouse=True)
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A checkpoint the sink linked to the query on this host."""
    monkeypatch.setenv(HINT_DIR_ENV, str(tmp_path / "hints"))
    link(query_key(QUERY), Checkpoint.resolve(str(tmp_path / "ck")))
    return str(tmp_path / "ck")


def barrier(batch_id: int) -> BarrierMetrics:
    return metrics(
        batch_id,
        duration_ms=1500,
        mode="unaligned",
        tasks_cut=1,
        rows_written=900,
        rows_replayed=40,
        rows_spilled=100,
        bytes_spilled=12_000,
        channel_state_files=1,
        channel_state_bytes=12_000,
    )


def progress(batch_id: int, with_source: bool = True) -> dict[str, Any]:
    sources = []
    if with_source:
        sources.append(
            {
                "endOffset": {"offsets": {"t": {"0": 10}}, "idleBarrier": 0, "barrierToken": "x"},
                "latestOffset": {"offsets": {"t": {"0": 25}}, "idleBarrier": 0},
            }
        )
    return {"id": QUERY, "batchId": batch_id, "sources": sources}


def test_the_stored_barrier_of_the_same_batch_joins_the_lag(checkpoint: str) -> None:
    write_metrics(Checkpoint.resolve(checkpoint), barrier(7))
    write_metrics(
        Checkpoint.resolve(checkpoint), barrier(9)
    )  # a later barrier: the report of 7 still gets 7
    assert read_barrier(Checkpoint.resolve(checkpoint), 7) == barrier(7)
    figures = figures_of(progress(7))
    assert figures is not None and figures.barrier == barrier(7)
    assert figures.offsets_behind is not None and figures.offsets_behind.max == 15
    assert "barrier unaligned in 1500 ms" in figures.describe()
    assert figures.to_dict()["offsetsBehindLatest"]["maxOffsetsBehindLatest"] == 15
    stale = figures_of(progress(8))  # the sink has not published batch 8 (yet)
    assert stale is not None and stale.barrier is None


def test_a_query_without_our_source_or_sink_has_no_figures(checkpoint: str) -> None:
    assert figures_of(progress(3, with_source=False)) is None
    write_metrics(Checkpoint.resolve(checkpoint), barrier(3))  # our sink behind another source
    only_sink = figures_of(progress(3, with_source=False))
    assert only_sink is not None and only_sink.offsets_behind is None


def test_the_listener_keeps_logs_and_hands_on_the_figures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[QueryFigures] = []
    listener = UnalignedListener(seen.append)
    with caplog.at_level(logging.INFO, logger="unaligned.monitoring.listener"):
        listener.onQueryProgress(SimpleNamespace(progress=progress(4)))
    assert listener.latest[QUERY] == seen[0] and seen[0].batch_id == 4
    assert "offsets behind latest min/avg/max 15/15.0/15" in caplog.text


def test_a_failure_in_the_listener_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = UnalignedListener()
    with caplog.at_level(logging.WARNING):
        listener.onQueryProgress(SimpleNamespace(progress={"id": QUERY, "batchId": "x"}))
    assert "could not compute" in caplog.text and listener.latest == {}
