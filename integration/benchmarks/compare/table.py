"""The one table ``python -m benchmarks compare`` prints: every workload in ``results.json``
that ran, a block each (a title, a header, a row per contender or variant), then the machine."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from benchmarks.compare.inputs import describe_machine

Columns = Sequence[tuple[str, int]]
"""A block's columns: title and width (the first left-aligned, the others right-aligned)."""

THROUGHPUT: Columns = (
    ("output", 9),
    ("peer", 23),
    ("peer-tuned", 23),
    ("ours", 23),
    ("ours/peer", 13),
    ("ours/tuned", 13),
)
BATCHES: Columns = (
    ("variant", 24),
    ("batches", 8),
    ("p50 ms", 9),
    ("p99 ms", 9),
    ("max ms", 9),
    ("1st commit s", 13),
    ("state B/batch (mean / max)", 28),
)
KILLS: Columns = (
    ("contender", 10),
    ("kills", 6),
    ("end s", 8),
    ("read back", 12),
    ("duplicates", 12),
    ("missing", 9),
    ("exactly once", 14),
)
RECOVERY: Columns = (
    ("variant", 29),
    ("session", 9),
    ("start()", 9),
    ("batch 0 addBatch", 18),
    ("1st commit", 12),
    ("batch 1 / 2 addBatch", 22),
    ("pending rows", 14),
)
LATENCY: Columns = (
    ("contender", 16),
    ("seen", 16),
    ("p50 ms", 9),
    ("p99 ms", 9),
    ("max ms", 9),
    ("batch p50 ms", 14),
    ("tiny batch p50 / p99 ms", 25),
    ("addBatch p50", 14),
)


def format_table(report: Mapping[str, Any]) -> str:
    """The table of ``report`` (the document ``results.json`` holds) as text."""
    blocks = [
        block(report[name])
        for name, block in (
            ("throughput", _throughput),
            ("backpressure", _backpressure),
            ("driver_kills", _driver_kills),
            ("recovery", _recovery),
            ("latency", _latency),
        )
        if name in report
    ]
    if "machine" in report:
        blocks.append(f"machine: {describe_machine(report['machine'])}")
    return "\n\n".join(blocks)


def _block(title: str, columns: Columns, rows: Iterable[Sequence[str]], *notes: str) -> str:
    def line(cells: Sequence[str]) -> str:
        (_, width), *rest = columns
        right = "".join(f"{c:>{w}}" for c, (_, w) in zip(cells[1:], rest, strict=True))
        return f"{cells[0]:<{width}}{right}"

    body = [line([name for name, _ in columns]), *(line(row) for row in rows)]
    return "\n".join([f"== {title}", *body, *notes])


def _throughput(w: Mapping[str, Any]) -> str:
    def row(output: str, o: Mapping[str, Any]) -> list[str]:
        wall, inside = o["best_records_per_s"], o["best_records_per_s_in_batches"]
        return [
            output,
            *(f"{wall[n]:,} / {inside[n]:,}" for n in ("peer", "peer-tuned", "ours")),
            f"{o['ours_over_peer']:.2f} / {o['ours_over_peer_in_batches']:.2f}",
            f"{o['ours_over_peer_tuned']:.2f} / {o['ours_over_peer_tuned_in_batches']:.2f}",
        ]

    notes = [f"kcat reads the input at {w['kcat_read_records_per_s']:,} records/s"]
    for output, o in w["outputs"].items():
        if "pair_ratios_over_peer_tuned" in o:
            ratios = o["pair_ratios_over_peer_tuned"]
            notes.append(
                f"{output}: ours/tuned per round {', '.join(f'{r:.2f}' for r in ratios)} "
                f"(median {statistics.median(ratios):.2f})"
            )
        if "floor_source" in o:
            f = o["floor_source"]
            notes.append(
                f"{output}: floor source (a Python source that reads nothing) "
                f"{f['best_records_per_s']:,} / {f['best_records_per_s_in_batches']:,}; "
                f"ours/floor {f['ours_over_floor']:.2f} / {f['ours_over_floor_in_batches']:.2f}"
            )
        if "cpu_s_per_million_median" in o:
            cpu = dict(o["cpu_s_per_million_median"])
            if "floor_source" in o:
                cpu["floor"] = o["floor_source"]["cpu_s_per_million_median"]
            notes.append(
                f"{output}: CPU s per million records (Python workers / Spark JVM / broker), "
                "median: "
                + "; ".join(
                    f"{name} {c['python_workers']:.2f} / {c['spark_jvm']:.2f} / {c['broker']:.2f}"
                    for name, c in cpu.items()
                )
            )
    if "tiny_batches" in w:
        t = w["tiny_batches"]
        notes.append(
            f"tiny batches ({t['records_per_batch']} records), ms per batch p50 / p99 "
            "(addBatch p50): "
            + "; ".join(
                f"{name} {c['batch_ms_p50']:.0f} / {c['batch_ms_p99']:.0f} "
                f"({c['add_batch_ms_p50']:.0f})"
                for name, c in t["contenders"].items()
            )
        )
    return _block(
        f"workload 1: records/s, {w['records']:,} records, best of {w['repeats']} "
        "(wall / in batches)",
        THROUGHPUT,
        (row(output, o) for output, o in w["outputs"].items()),
        *notes,
    )


def _seconds(value: float | None) -> str:
    """Seconds to two decimals (a median of two runs is a float such as 8.995000000000001);
    ``-`` for none."""
    return "-" if value is None else f"{value:,.2f}"


def _batch_row(name: str, r: Mapping[str, Any]) -> list[str]:
    state = r.get("channel_state_bytes_per_batch")
    durations = [f"{r[f'duration_ms_{k}']:,.0f}" for k in ("p50", "p99", "max")]
    return [
        name,
        str(r["batches"]),
        *durations,
        _seconds(r["first_commit_s"]),
        f"{statistics.fmean(state):,.0f} / {max(state):,}" if state else "-",
    ]


def _backpressure(w: Mapping[str, Any]) -> str:
    udf = w["slow_udf"]
    throttled = _block(
        f"workload 2: {w['records']:,} records ({w['hot_partition_records']:,} in the hot "
        f"partition), output throttled to {w['quota_bytes_per_s']:,} B/s",
        BATCHES,
        (_batch_row(name, r) for name, r in w["throttled"].items()),
    )
    slow = _block(
        f"workload 2, slow UDF: {udf['seconds_per_row'] * 1000:g} ms a row, {udf['records']:,} "
        f"records, no throttle; ours targetBatchDuration {udf['target_batch_duration']}",
        BATCHES,
        (_batch_row(name, r) for name, r in udf["runs"].items()),
    )
    return f"{throttled}\n{slow}"


def _driver_kills(w: Mapping[str, Any]) -> str:
    def row(name: str, r: Mapping[str, Any]) -> list[str]:
        once = "-" if "exactly_once" not in r else "yes" if r["exactly_once"] else "NO"
        counts = [f"{r[k]:,}" for k in ("records", "duplicates", "missing")]
        return [name, str(r["kills"]), _seconds(r["seconds_to_end"]), *counts, once]

    return _block(
        f"workload 3: {w['records']:,} records, driver killed every {w['kill_every_s']:g} s "
        f"(for at most {w['kill_for_s']:g} s), output throttled to {w['quota_bytes_per_s']:,} B/s",
        KILLS,
        (row(name, r) for name, r in w["contenders"].items()),
    )


def _recovery(w: Mapping[str, Any]) -> str:
    def row(name: str, r: Mapping[str, Any]) -> list[str]:
        pending = max(run["pending_rows_at_kill"] for run in r["runs"])
        return [
            name,
            _seconds(r["session_s"]),
            _seconds(r["query_started_s"]),
            _seconds(r["batch_0_add_batch_s"]),
            _seconds(r["first_commit_s"]),
            f"{_seconds(r['batch_1_add_batch_s'])} / {_seconds(r['batch_2_add_batch_s'])}",
            f"{pending:,}" if pending else "-",
        ]

    def ratio_notes(ratios: Mapping[str, Mapping[str, Any]]) -> list[str]:
        return [
            f"  {label} {r['median']:.2f} (rounds {', '.join(f'{x:.2f}' for x in r['per_round'])})"
            for label, r in ratios.items()
        ]

    blocks = []
    for input_name, setups in w["inputs"].items():
        for setup_name, starts in setups.items():
            for start, s in starts.items():
                blocks.append(
                    _block(
                        f"workload 4, {input_name} input, {setup_name}, {start}: seconds from the "
                        f"launch, median of {w['repeats']}",
                        RECOVERY,
                        (row(name, r) for name, r in s["variants"].items()),
                        "first commit, median of the rounds' ratios:",
                        *ratio_notes(s["first_commit_ratios"]),
                    )
                )
    return "\n".join(blocks)


def _latency(w: Mapping[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    def row(name: str, r: Mapping[str, Any]) -> list[str]:
        tiny = r["tiny_batches"]
        return [
            name,
            f"{r['seen']:,} / {r['produced']:,}",
            *(ms(r.get(f"latency_ms_{k}")) for k in ("p50", "p99", "max")),
            ms(r.get("batch_ms_p50_steady")),
            f"{ms(tiny.get('batch_ms_p50'))} / {ms(tiny.get('batch_ms_p99'))}",
            ms(tiny.get("add_batch_ms_p50")),
        ]

    return _block(
        f"workload 5: visible latency (read_committed) at {w['rate']:,} records/s for "
        f"{w['seconds']} s (first {w['warmup_s']} s left out); tiny batches at {w['tiny_rate']} "
        f"records/s for {w['tiny_seconds']} s",
        LATENCY,
        (row(name, r) for name, r in w["contenders"].items()),
        "seen: records read back by the independent consumer / produced after the warm-up",
    )
