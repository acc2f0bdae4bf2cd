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
FLOOR_COLOUR = "#2ca02c"
OUTPUT_NAMES = {"noop": "no-op", "kafka": "Kafka", "parquet": "Parquet"}


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
    import matplotlib.pyplot as plt

    fig.text(0.01, 0.01, caption, fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
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
        bars = ax.bar(xs, values, width, label=name, color=COLOURS[name])
        ax.bar_label(bars, [f"{v / 1000:,.0f}k" for v in values], fontsize=7)
    ax.axhline(w["kcat_read_records_per_s"], color="#d62728", linestyle="--", label="kcat read")
    labels = [
        f"Kafka -> {OUTPUT_NAMES.get(o, o)}\nours/peer {w['outputs'][o]['ours_over_peer']:.2f}, "
        f"ours/tuned {w['outputs'][o]['ours_over_peer_tuned']:.2f}"
        for o in outputs
    ]
    ax.set_xticks(range(len(outputs)), labels, fontsize=8)
    ax.set_ylabel("records/s (wall, best run)")
    ax.yaxis.set_major_formatter("{x:,.0f}")
    ax.set_title(f"Workload 1: throughput, {w['records']:,} records of 100 bytes, 8 partitions")
    ax.legend(fontsize=8)
    return fig


def _backpressure(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4.8))
    names = list(w["throttled"])
    left.boxplot([w["throttled"][n]["durations_ms"] for n in names])
    left.set_xticks(range(1, len(names) + 1), names, rotation=20, fontsize=8)
    for i, name in enumerate(names, start=1):
        left.plot(i, w["throttled"][name]["first_commit_s"] * 1000, "r^")
    left.plot([], [], "r^", label="first commit after start()")
    left.set_ylabel("batch duration (ms)")
    left.set_title(f"Throttled to {w['quota_bytes_per_s']:,} B/s, hot partition", fontsize=10)
    left.legend(fontsize=7)
    for name, run in w["throttled"].items():
        state = run.get("channel_state_bytes_per_batch")
        if state is not None:
            middle.plot(range(len(state)), [b / 1000 for b in state], "o-", label=name)
    middle.set_xlabel("batch")
    middle.xaxis.get_major_locator().set_params(integer=True)
    middle.set_ylabel("channel state (kB)")
    middle.set_title("Ours: channel state stored per batch", fontsize=10)
    middle.legend(fontsize=7)
    udf = w["slow_udf"]
    for name, run in udf["runs"].items():
        right.plot(run["durations_ms"], "o-", label=name, color=COLOURS.get(name))
    right.set_xlabel("batch")
    right.xaxis.get_major_locator().set_params(integer=True)
    right.set_ylabel("batch duration (ms)")
    right.set_title(
        f"Slow UDF: ours targetBatchDuration {udf['target_batch_duration']}", fontsize=10
    )
    right.legend(fontsize=7)
    fig.suptitle(f"Workload 2: backpressure and skew, {w['records']:,} records")
    return fig


def _driver_kills(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in w["contenders"].items():
        ts = [t for t, _ in run["committed_over_time"]]
        counts = [n for _, n in run["committed_over_time"]]
        label = f"{name}: {run['kills']} kills, {run['duplicates']:,} duplicates"
        ax.plot(ts, counts, label=label, color=COLOURS[name])
        for t in run["kill_times_s"]:
            ax.axvline(t, color=COLOURS[name], alpha=0.25, linewidth=0.8)
    ax.axhline(w["records"], color="#2ca02c", linestyle=":", label="input records")
    if any(run["seconds_to_end"] > w["kill_for_s"] for run in w["contenders"].values()):
        ax.axvline(w["kill_for_s"], color="#d62728", linestyle="--", label="kills stop")
    ax.set_xlabel("seconds (faint lines: kills)")
    ax.set_ylabel("committed output records (read_committed)")
    ax.yaxis.set_major_formatter("{x:,.0f}")
    ax.set_title(f"Workload 3: driver killed every {w['kill_every_s']:g} s and restarted")
    ax.legend(fontsize=8)
    return fig


def _recovery(w: Mapping[str, Any]) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = [
        (input_name, start, setups)
        for input_name, setups in w["inputs"].items()
        for start in ("new query", "restart")
        if any(start in starts for starts in setups.values())
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels) + 1), squeeze=False)
    grey = ("#e4e4e4", "#c4c4c4")
    for ax, (input_name, start, setups) in zip(axes[:, 0], panels, strict=True):
        labels, bars = [], []
        for setup_name, starts in setups.items():
            for name, v in starts[start]["variants"].items():
                labels.append(f"{name} ({setup_name})")
                contender = "floor" if name == "floor" else name.split(",")[0]
                colour = COLOURS.get(contender, FLOOR_COLOUR)
                bars.append((v["session_s"], v["query_started_s"], v["first_commit_s"], colour))
        left = [0.0] * len(bars)
        for i, colours in enumerate((grey[:1], grey[1:], None)):
            ends = [b[i] for b in bars]
            widths = [end - start_ for end, start_ in zip(ends, left, strict=True)]
            colour = [b[3] for b in bars] if colours is None else colours * len(bars)
            drawn = ax.barh(labels, widths, left=left, color=colour)
            left = ends
        ax.bar_label(drawn, [f"{end:.1f} s" for end in left], fontsize=7, padding=3)
        ax.set_xlim(0, max(left) * 1.15)
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"{input_name} input, {start}", fontsize=9)
    axes[-1, 0].set_xlabel(
        f"seconds from the launch to the first commit (median of {w['repeats']})"
    )
    handles = [
        Patch(color=grey[0], label="Spark session up"),
        Patch(color=grey[1], label="start()"),
    ]
    handles += [Patch(color=COLOURS[n], label=f"first commit: {n}") for n in ("peer", "ours")]
    handles.append(Patch(color=FLOOR_COLOUR, label="first commit: floor"))
    fig.legend(handles=handles, fontsize=7, loc="upper center", ncol=5)
    fig.suptitle("Workload 4: a query's first batch, new and after a SIGKILL", y=0.995, fontsize=10)
    return fig
