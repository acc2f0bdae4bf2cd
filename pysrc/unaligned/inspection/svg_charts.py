"""Bar charts as inline SVG text, for the HTML report: no script, no external library.

One group of bars per category (a barrier), one bar per series in each group. Every bar is a
``<rect class="bar ...">`` carrying ``data-batch``, ``data-series`` and ``data-value``, with a
``<title>`` tooltip; a category whose value is unknown (``None``) gets no bar. An optional
threshold is drawn as a dashed line (``class="threshold"``) across the plot, and optional
markers as labelled vertical lines (``class="marker"``, ``data-batch``) before a category.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

WIDTH = 1100
HEIGHT = 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 16, 40
_GRID_LINES = 4  # about this many grid steps
_MAX_LABELS = 30


@dataclass(frozen=True)
class Series:
    """Values of one series, in category order. ``bar_classes`` overrides ``css_class`` per
    bar (e.g. the barrier's mode); ``None`` values draw no bar."""

    name: str
    css_class: str
    values: Sequence[float | None]
    bar_classes: Sequence[str] | None = None


def axis_scale(largest: float) -> tuple[float, int]:
    """The y axis for values up to ``largest``: its top and the number of grid steps. A step
    is 1, 2 or 5 times a power of ten, about a quarter of ``largest`` (labels stay round)."""
    if largest <= 0:
        return 1.0, 1
    rough = largest / _GRID_LINES
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= rough)
    steps = max(1, math.ceil(largest / step - 1e-9))
    return step * steps, steps


def _number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def bar_chart(
    chart_id: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    label: Callable[[float], str],
    threshold: float | None = None,
    threshold_label: str = "",
    markers: Mapping[str, str] | None = None,
) -> str:
    """An ``<svg>`` element: grouped bars per category, y axis formatted by ``label``;
    ``markers`` maps a category to the label of a vertical line drawn before its bars."""
    for s in series:
        if len(s.values) != len(categories):
            raise ValueError(f"series {s.name!r} has {len(s.values)} values for {len(categories)}")
    known = [v for s in series for v in s.values if v is not None]
    top, steps = axis_scale(max([*known, threshold or 0.0, 0.0]))
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM

    def y(value: float) -> float:
        return _TOP + plot_h - plot_h * value / top

    parts = [
        f'<svg id="{html.escape(chart_id)}" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img">'
    ]
    for i in range(steps + 1):
        value = top * i / steps
        gy = y(value)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" y1="{gy:.1f}" x2="{WIDTH - _RIGHT}" y2="{gy:.1f}"/>'
            f'<text class="axis" x="{_LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end">'
            f"{html.escape(label(value))}</text>"
        )
    group_w = plot_w / max(len(categories), 1)
    bar_w = max(group_w * 0.8 / max(len(series), 1), 0.5)
    every = max(1, math.ceil(len(categories) / _MAX_LABELS))
    for c, category in enumerate(categories):
        x0 = _LEFT + c * group_w + group_w * 0.1
        for k, s in enumerate(series):
            bar_value = s.values[c]
            if bar_value is None:
                continue
            css = s.bar_classes[c] if s.bar_classes is not None else s.css_class
            by = y(bar_value)
            tip = f"batch {category} - {s.name}: {label(bar_value)}"
            parts.append(
                f'<rect class="bar {html.escape(css)}" data-batch="{html.escape(category)}" '
                f'data-series="{html.escape(s.name)}" data-value="{_number(bar_value)}" '
                f'x="{x0 + k * bar_w:.1f}" y="{by:.1f}" width="{bar_w:.1f}" '
                f'height="{_TOP + plot_h - by:.1f}"><title>{html.escape(tip)}</title></rect>'
            )
        if markers and category in markers:
            mx = _LEFT + c * group_w
            parts.append(
                f'<line class="marker" data-batch="{html.escape(category)}" x1="{mx:.1f}" '
                f'y1="{_TOP}" x2="{mx:.1f}" y2="{_TOP + plot_h}"/>'
                f'<text class="marker-label" x="{mx + 3:.1f}" y="{_TOP + 11}">'
                f"{html.escape(markers[category])}</text>"
            )
        if c % every == 0:
            parts.append(
                f'<text class="axis" x="{_LEFT + (c + 0.5) * group_w:.1f}" '
                f'y="{HEIGHT - _BOTTOM + 16}" text-anchor="middle">{html.escape(category)}</text>'
            )
    parts.append(
        f'<line class="axis-line" x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{WIDTH - _RIGHT}" '
        f'y2="{_TOP + plot_h}"/>'
        f'<text class="axis" x="{_LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" '
        'text-anchor="middle">batch (barrier) id</text>'
    )
    if threshold is not None:
        ty = y(threshold)
        parts.append(
            f'<line class="threshold" x1="{_LEFT}" y1="{ty:.1f}" x2="{WIDTH - _RIGHT}" '
            f'y2="{ty:.1f}" data-value="{_number(threshold)}"/>'
            f'<text class="threshold-label" x="{WIDTH - _RIGHT - 4}" y="{ty - 5:.1f}" '
            f'text-anchor="end">{html.escape(threshold_label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def legend(entries: Sequence[tuple[str, str]]) -> str:
    """``<div class="legend">`` with a swatch per (css class, text)."""
    items = "".join(
        f'<span><i class="swatch {html.escape(css)}"></i>{html.escape(text)}</span>'
        for css, text in entries
    )
    return f'<div class="legend">{items}</div>'
