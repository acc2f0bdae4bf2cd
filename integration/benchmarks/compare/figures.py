"""The PNGs of the comparison, one per workload, with the machine in each caption.

matplotlib is the ``bench`` extra (``pip install -e '.[bench]'``; ``./dev bench`` installs it);
without it :func:`draw_all` says so and draws nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.compare.inputs import describe_machine

COLOURS = {"peer": "#8c8c8c", "peer-tuned": "#4d4d4d", "ours": "#1f77b4"}


def draw_all(report: Mapping[str, Any], directory: Path) -> list[Path]:
    """Draw every workload present in ``report``; returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        print("matplotlib is missing: pip install -e '.[bench]' to draw the figures")
        return []
    caption = describe_machine(report["machine"])
    drawn = []
    for name, draw in (
        ("throughput", _throughput),
        ("backpressure", _backpressure),
        ("driver_kills", _driver_kills),
        ("recovery", _recovery),
    ):
        if name in report:
            drawn.append(_save(draw(report[name]), caption, directory / f"{name}.png"))
    return drawn


def _save(fig: Any, caption: str, path: Path) -> Path:
    fig.text(0.01, 0.01, caption, fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    print(f"written {path}")
    return path


def _throughput(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    outputs = list(w["outputs"])
    names = list(COLOURS)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [w["outputs"][o]["best_records_per_s"][name] for o in outputs]
        xs = [x + (i - 1) * width for x in range(len(outputs))]
        ax.bar(xs, values, width, label=name, color=COLOURS[name])
    ax.axhline(w["kcat_read_records_per_s"], color="#d62728", linestyle="--", label="kcat read")
    ax.set_xticks(range(len(outputs)), [f"Kafka -> {o}" for o in outputs])
    ax.set_ylabel("records/s (best run)")
    ax.set_title(f"Workload 1: throughput, {w['records']:,} records of 100 bytes")
    ax.legend()
    return fig


def _backpressure(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    names = list(w["throttled"])
    left.boxplot([w["throttled"][n]["durations_ms"] for n in names], showfliers=True)
    left.set_xticks(range(1, len(names) + 1), names, rotation=15, fontsize=8)
    left.set_ylabel("batch duration (ms)")
    left.set_title("Throttled output, hot partition")
    for i, name in enumerate(names, start=1):
        left.plot(i, w["throttled"][name]["first_commit_s"] * 1000, "r^")
    left.plot([], [], "r^", label="first commit after start")
    left.legend(fontsize=7)
    udf = w["slow_udf"]["runs"]
    for name, run in udf.items():
        right.plot(run["durations_ms"], "o-", label=name, color=COLOURS.get(name))
    right.set_xlabel("batch (sorted by duration)")
    right.set_ylabel("batch duration (ms)")
    right.set_title(f"Slow UDF: ours targetBatchDuration {w['slow_udf']['target_batch_duration']}")
    right.legend(fontsize=7)
    return fig


def _driver_kills(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in w["contenders"].items():
        ts = [t for t, _ in run["committed_over_time"]]
        counts = [n for _, n in run["committed_over_time"]]
        ax.plot(ts, counts, label=f"{name} ({run['duplicates']:,} duplicates)", color=COLOURS[name])
    ax.axhline(w["records"], color="#2ca02c", linestyle=":", label="input records")
    ax.set_xlabel("seconds")
    ax.set_ylabel("committed output records")
    ax.set_title(f"Workload 3: driver killed every {w['kill_every_s']:.0f} s")
    ax.legend()
    return fig


def _recovery(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(w["variants"])
    values = [w["variants"][n]["restart_to_first_commit_s"] for n in names]
    ax.barh(names, values, color=[COLOURS["peer"], COLOURS["ours"], COLOURS["ours"]])
    ax.set_xlabel("seconds from restart to the first committed batch")
    ax.set_title("Workload 4: recovery")
    return fig
