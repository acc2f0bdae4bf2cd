"""The one table ``python -m benchmarks compare`` prints: every workload in ``results.json``
that ran, a block each, then the machine."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from benchmarks.compare.inputs import describe_machine


def format_table(report: Mapping[str, Any]) -> str:
    """The table of ``report`` (the document ``results.json`` holds) as text."""
    blocks = [
        block(report[name])
        for name, block in (
            ("throughput", _throughput),
            ("backpressure", _backpressure),
            ("driver_kills", _driver_kills),
            ("recovery", _recovery),
        )
        if name in report
    ]
    if "machine" in report:
        blocks.append(f"machine: {describe_machine(report['machine'])}")
    return "\n\n".join(blocks)


def _throughput(w: Mapping[str, Any]) -> str:
    lines = [
        f"== workload 1: records/s, {w['records']:,} records, best of {w['repeats']} "
        "(wall / in batches)",
        f"{'output':<9}{'peer':>20}{'peer-tuned':>20}{'ours':>20}{'ours/peer':>13}"
        f"{'ours/tuned':>13}",
    ]
    for output, o in w["outputs"].items():
        wall, inside = o["best_records_per_s"], o["best_records_per_s_in_batches"]
        cells = [f"{wall[n]:,} / {inside[n]:,}" for n in ("peer", "peer-tuned", "ours")]
        cells.append(f"{o['ours_over_peer']:.2f} / {o['ours_over_peer_in_batches']:.2f}")
        cells.append(
            f"{o['ours_over_peer_tuned']:.2f} / {o['ours_over_peer_tuned_in_batches']:.2f}"
        )
        widths = (20, 20, 20, 13, 13)
        row = "".join(f"{c:>{n}}" for c, n in zip(cells, widths, strict=True))
        lines.append(f"{output:<9}{row}")
    lines.append(f"kcat reads the input at {w['kcat_read_records_per_s']:,} records/s")
    return "\n".join(lines)


def _batch_row(name: str, r: Mapping[str, Any], state: str = "-") -> str:
    return (
        f"{name:<24}{r['batches']:>8}{r['duration_ms_p50']:>9,.0f}{r['duration_ms_p99']:>9,.0f}"
        f"{r['duration_ms_max']:>9,.0f}{r['first_commit_s']:>13}{state:>28}"
    )


def _backpressure(w: Mapping[str, Any]) -> str:
    lines = [
        f"== workload 2: {w['records']:,} records ({w['hot_partition_records']:,} in the hot "
        f"partition), output throttled to {w['quota_bytes_per_s']:,} B/s",
        f"{'variant':<24}{'batches':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'1st commit s':>13}{'state B/batch (mean / max)':>28}",
    ]
    for name, r in w["throttled"].items():
        state = r.get("channel_state_bytes_per_batch")
        mean_max = f"{statistics.fmean(state):,.0f} / {max(state):,}" if state else "-"
        lines.append(_batch_row(name, r, mean_max))
    udf = w["slow_udf"]
    lines.append(
        f"slow UDF ({udf['seconds_per_row'] * 1000:g} ms a row, {udf['records']:,} records, no "
        f"throttle; ours targetBatchDuration {udf['target_batch_duration']}):"
    )
    lines += [_batch_row(f"  {name}", r) for name, r in udf["runs"].items()]
    return "\n".join(lines)


def _driver_kills(w: Mapping[str, Any]) -> str:
    lines = [
        f"== workload 3: {w['records']:,} records, driver killed every {w['kill_every_s']:g} s "
        f"(for at most {w['kill_for_s']:g} s), output throttled to {w['quota_bytes_per_s']:,} B/s",
        f"{'contender':<10}{'kills':>6}{'end s':>8}{'read back':>12}{'duplicates':>12}"
        f"{'missing':>9}{'exactly once':>14}",
    ]
    for name, r in w["contenders"].items():
        once = "-" if "exactly_once" not in r else "yes" if r["exactly_once"] else "NO"
        lines.append(
            f"{name:<10}{r['kills']:>6}{r['seconds_to_end']:>8}{r['records']:>12,}"
            f"{r['duplicates']:>12,}{r['missing']:>9,}{once:>14}"
        )
    return "\n".join(lines)


def _recovery(w: Mapping[str, Any]) -> str:
    lines = [
        f"== workload 4: seconds from a restart after a SIGKILL, median of {w['repeats']}",
        f"{'variant':<26}{'session up':>11}{'start()':>9}{'1st commit':>11}{'pending rows':>14}"
        f"{'pending B':>12}",
    ]
    for name, r in w["variants"].items():
        rows = max(run["pending_rows_at_kill"] for run in r["runs"])
        state = max(run["pending_bytes_at_kill"] for run in r["runs"])
        lines.append(
            f"{name:<26}{r['restart_to_session_s']:>11}{r['restart_to_query_started_s']:>9}"
            f"{r['restart_to_first_commit_s']:>11}{rows:>14,}{state:>12,}"
        )
    lines.append("pending: channel state at the kill (the most of the runs)")
    return "\n".join(lines)
