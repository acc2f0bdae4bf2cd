"""unaligned.inspection.query_state: the query's state, its runs and the over-the-timeout note,
read from the shape of a checkpoint (and shown by ``unaligned report`` / ``inspect``)."""

from __future__ import annotations

from pathlib import Path

from checkpoint_files import (
    decide,
    kafka_item,
    metrics,
    new_checkpoint,
    plan,
    source_offset,
    spark_commit,
    store_metrics,
)
from unaligned.checkpoint import Checkpoint
from unaligned.inspection import build_view, render_text
from unaligned.inspection.html_report import render_html
from unaligned.inspection.model import BarrierView
from unaligned.inspection.query_state import (
    RUN_START_DELAY_MS,
    over_timeout_note,
    query_state,
    run_starts,
)


def _committed(root: Path, batch: int, **fields: object) -> None:
    plan(root, batch, [source_offset({0: 10 * (batch + 1)})])
    store_metrics(root, metrics(batch, **fields))
    decide(root, batch, prepared=[kafka_item(f"unaligned-q-0-{batch}")])
    spark_commit(root, batch)


def test_a_query_that_never_planned_a_batch_is_shown_as_not_started(tmp_path: Path) -> None:
    view = build_view(Checkpoint.resolve(str(new_checkpoint(tmp_path / "ck"))))
    state = query_state(view)
    assert state.kind == "not started" and state.problem
    page = render_html(view)
    assert 'data-state="not started"' in page and "query.exception()" in page


def test_a_query_that_failed_in_its_first_batch_is_shown_as_never_committed(
    tmp_path: Path,
) -> None:
    root = new_checkpoint(tmp_path / "ck")
    plan(root, 0, [source_offset({0: 10})])
    view = build_view(Checkpoint.resolve(str(root)))

    state = query_state(view)

    assert state.kind == "never committed" and state.problem
    assert "batch 0" in state.text and "not decided by the sink" in state.text
    page = render_html(view)
    assert 'class="state problem"' in page and 'data-state="never committed"' in page
    assert "<svg" not in page and "committed none" in page  # no empty charts
    assert "No batch was ever committed" in render_text(view)


def test_an_open_newest_batch_and_a_healthy_query(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "ck")
    _committed(root, 0)
    plan(root, 1, [source_offset({0: 30})])
    assert query_state(build_view(Checkpoint.resolve(str(root)))).kind == "last batch open"
    store_metrics(root, metrics(1))
    decide(root, 1, prepared=[kafka_item("unaligned-q-0-1")])
    spark_commit(root, 1)
    state = query_state(build_view(Checkpoint.resolve(str(root))))
    assert state.kind == "committed" and not state.problem
    assert 'class="state"' in render_html(build_view(Checkpoint.resolve(str(root))))


def test_the_first_batch_of_each_run_is_marked_start_or_restart(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "ck")
    _committed(root, 0, start_delay_ms=7_300)  # a run's first batch waits for its workers
    _committed(root, 1, start_delay_ms=120)
    _committed(root, 2, start_delay_ms=13_180)  # re-run after a crash: the outage is in it
    _committed(root, 3, start_delay_ms=RUN_START_DELAY_MS - 1)
    view = build_view(Checkpoint.resolve(str(root)))

    assert run_starts(view.barriers) == {0: "start", 2: "restart"}
    page = render_html(view)
    assert page.count('class="marker"') == 4  # two charts with marks (duration, start delay)
    assert 'data-batch="2" x1=' in page
    assert "2 (restart)" in page and "0 (start)" in page
    assert "runs: batch 0 (start), batch 2 (restart)" in render_text(view)


def _barrier(batch: int, mode: str, duration_ms: int) -> BarrierView:
    return BarrierView(batch, "done", "committed", mode=mode, duration_ms=duration_ms)  # type: ignore[arg-type]


def test_over_the_timeout_is_explained_as_normal_in_unaligned_mode() -> None:
    assert over_timeout_note([_barrier(0, "unaligned", 900)], 1_000) is None
    note = over_timeout_note(
        [_barrier(0, "unaligned", 1_400), _barrier(1, "unaligned", 1_250)], 1_000
    )
    assert note is not None
    assert note.startswith("2 barrier(s) took longer") and "2 unaligned, by at most 400 ms" in note
    assert "expected" in note and "waited for the sink" not in note
    mixed = over_timeout_note([_barrier(0, "aligned", 3_000)], 1_000)
    assert mixed is not None and "waited for the sink" in mixed and "expected" not in mixed


def test_a_run_start_over_the_timeout_is_counted_apart() -> None:
    first = BarrierView(
        0, "done", "committed", mode="unaligned", duration_ms=9_000, start_delay_ms=7_000
    )
    note = over_timeout_note([first, _barrier(1, "unaligned", 1_100)], 1_000)
    assert note is not None
    assert "1 of them began a run" in note and "1 unaligned, by at most 100 ms" in note


def test_the_final_checkpoint_over_the_timeout_is_counted_apart() -> None:
    note = over_timeout_note([_barrier(4, "aligned", 1_600)], 1_000, final_batch=4)
    assert note is not None
    assert "Batch 4 is the final checkpoint" in note and "waited for the sink" not in note


def test_the_report_explains_barriers_over_the_timeout(checkpoint: Path) -> None:
    page = render_html(build_view(Checkpoint.resolve(str(checkpoint))), timeout_ms=30_000)
    assert 'id="over-timeout-note"' in page and "expected" in page
