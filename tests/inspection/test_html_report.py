"""``unaligned report``: the page's charts (one bar per barrier and series, the timeout line),
its numbers, and that it loads nothing from anywhere."""

from __future__ import annotations

from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest

from unaligned import cli
from unaligned.checkpoint import Checkpoint
from unaligned.inspection import build_view
from unaligned.inspection.html_report import render_html
from unaligned.inspection.svg_charts import Series, axis_scale, bar_chart


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text inside each element id."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.svg: str | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self.svg = values.get("id")
        values["_chart"] = self.svg or ""
        self.tags.append((tag, values))

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.svg = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def bars(self) -> dict[str, list[dict[str, str]]]:
        by_chart: dict[str, list[dict[str, str]]] = defaultdict(list)
        for tag, attrs in self.tags:
            if tag == "rect" and "bar" in attrs.get("class", "").split():
                by_chart[attrs["_chart"]].append(attrs)
        return by_chart


def parsed(page: str) -> Elements:
    elements = Elements()
    elements.feed(page)
    return elements


def test_one_bar_per_measured_barrier_and_series(checkpoint: Path) -> None:
    page = parsed(render_html(build_view(Checkpoint.resolve(str(checkpoint))), timeout_ms=30_000))
    bars = page.bars()
    assert set(bars) == {"chart-duration", "chart-start-delay", "chart-rows", "chart-state-bytes"}
    duration = bars["chart-duration"]
    assert [(b["data-batch"], b["data-value"]) for b in duration] == [
        ("0", "1200"),
        ("1", "31000"),
        ("2", "2000"),
    ]
    assert [b["class"] for b in duration] == ["bar aligned", "bar unaligned", "bar aligned"]
    assert [b["data-value"] for b in bars["chart-start-delay"]] == ["40", "120", "40"]
    rows = {(b["data-batch"], b["data-series"]): b["data-value"] for b in bars["chart-rows"]}
    assert rows == {
        ("0", "rows spilled"): "0",
        ("0", "rows replayed"): "0",
        ("1", "rows spilled"): "30",
        ("1", "rows replayed"): "0",
        ("2", "rows spilled"): "3",
        ("2", "rows replayed"): "30",
    }
    state = {
        (b["data-batch"], b["data-series"]): b["data-value"] for b in bars["chart-state-bytes"]
    }
    assert state[("1", "channel-state file bytes")] == "4096"
    assert state[("2", "inline bytes")] == "100"


def test_bars_grow_with_their_value_and_the_timeout_line_sits_at_its_value(
    checkpoint: Path,
) -> None:
    page = parsed(render_html(build_view(Checkpoint.resolve(str(checkpoint))), timeout_ms=20_000))
    heights = [float(b["height"]) for b in page.bars()["chart-duration"]]
    assert heights[0] < heights[2] < heights[1]
    (line,) = [a for t, a in page.tags if t == "line" and a.get("class") == "threshold"]
    assert line["data-value"] == "20000" and line["_chart"] == "chart-duration"
    # the 20 s line sits at 20/31 of the 31 s bar's height above the plot's bottom
    bar_bottom = float(page.bars()["chart-duration"][0]["y"]) + heights[0]
    assert bar_bottom - float(line["y1"]) == pytest.approx(heights[1] * 20 / 31, rel=0.01)


def test_the_page_says_the_timeout_is_assumed_and_shows_the_summary(checkpoint: Path) -> None:
    page = render_html(build_view(Checkpoint.resolve(str(checkpoint))), timeout_ms=45_000)
    text = " ".join(parsed(page).text)
    assert "not stored in the checkpoint: this page assumes 45.0 s" in text
    assert "alignedCheckpointTimeout 45.0 s (assumed)" in text
    cards = {a["data-card"] for t, a in parsed(page).tags if "data-card" in a}
    assert {"barriers", "unaligned", "over the timeout", "in-doubt", "pending rows"} <= cards
    for fact in ("unaligned-q-0-1", "in[0:40, 1:15]", "After batch 3: 30 rows in 2 task(s)"):
        assert fact in text


def test_the_page_loads_nothing(checkpoint: Path) -> None:
    page = render_html(build_view(Checkpoint.resolve(str(checkpoint))))
    tags = {t for t, _ in parsed(page).tags}
    assert not tags & {"script", "link", "img", "iframe", "object"}
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "url(" not in page


def test_report_command_writes_the_page(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    assert cli.main(["report", str(checkpoint), "-o", str(out), "--timeout", "2m"]) == 0
    assert "5 barriers" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "assumes 120.0 s" in page


def test_a_checkpoint_without_batches_has_no_chart(tmp_path: Path) -> None:
    from checkpoint_files import new_checkpoint

    page = render_html(build_view(Checkpoint.resolve(str(new_checkpoint(tmp_path / "ck")))))
    assert "<svg" not in page and "No batch planned yet." in page


@pytest.mark.parametrize(
    ("largest", "scale"),
    [
        (0, (1, 1)),
        (40, (40, 4)),
        (41, (60, 3)),
        (30, (30, 3)),
        (31_000, (40_000, 4)),
        (4096, (6000, 3)),
        (0.7, (0.8, 4)),
    ],
)
def test_axis_scale_has_round_steps_and_reaches_the_largest_value(
    largest: float, scale: tuple[float, int]
) -> None:
    top, steps = axis_scale(largest)
    assert (top, steps) == pytest.approx(scale)
    assert top >= largest


def test_a_series_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="2 values for 3"):
        bar_chart("c", ["0", "1", "2"], [Series("s", "x", [1.0, 2.0])], label=str)
