"""The pure helpers of ``python -m benchmarks compare`` (no Spark, no broker): percentiles and
figures from progress reports, the output check, the workload choice and the printed table."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.bench_compare import selected_workloads
from benchmarks.compare import inputs, latency, progress, recovery, table


def _progress(timestamp: str, duration_ms: int, rows: int) -> dict[str, Any]:
    return {
        "timestamp": timestamp,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": duration_ms},
    }


def test_percentile_is_the_nearest_rank() -> None:
    values = list(range(1, 101))
    assert progress.percentile(values, 0.5) == 50
    assert progress.percentile(values, 0.99) == 99
    assert progress.percentile([3, 1, 2], 0.99) == 3
    assert progress.percentile([7], 0.5) == 7
    with pytest.raises(ValueError):
        progress.percentile([], 0.5)


def test_batch_figures_time_the_first_commit_from_the_start() -> None:
    reports = [
        _progress("2026-01-01T00:00:10.000Z", 2_000, 100),
        _progress("2026-01-01T00:00:12.000Z", 500, 50),
        _progress("2026-01-01T00:00:12.500Z", 4_000, 10),
    ]
    started = progress.epoch_s("2026-01-01T00:00:09.000Z")
    figures = progress.batch_figures(reports, started)
    assert figures["batches"] == 3
    assert figures["duration_ms_p50"] == 2_000
    assert figures["duration_ms_p99"] == figures["duration_ms_max"] == 4_000
    assert figures["first_commit_s"] == 3.0
    assert figures["durations_ms"] == [2_000, 500, 4_000]
    assert figures["rows_per_batch"] == [100, 50, 10]
    assert progress.rows_and_batch_seconds(reports) == (160, 6.5)


def test_check_values_of_an_exact_output() -> None:
    counts = inputs.skewed_counts(40)
    values = [inputs.value_of(p, s) for p, n in counts.items() for s in range(n)]
    assert inputs.check_values(values, counts) == {
        "records": 40,
        "distinct": 40,
        "duplicates": 0,
        "missing": 0,
        "unknown": 0,
        "gaps": 0,
    }


def test_check_values_counts_duplicates_gaps_and_strangers() -> None:
    counts = {0: 5, 1: 3}
    values = [inputs.value_of(0, s) for s in (0, 1, 1, 3)]  # 2 is a gap, 4 missing
    values += [inputs.value_of(1, 0), inputs.value_of(1, 7), b"junk"]
    check = inputs.check_values(values, counts)
    keys = ("records", "distinct", "duplicates", "missing", "unknown", "gaps")
    assert tuple(check[k] for k in keys) == (7, 4, 1, 4, 2, 1)


def test_an_exactly_once_prefix_has_no_gaps() -> None:
    counts = {0: 10, 1: 10}
    values = [inputs.value_of(0, s) for s in range(4)] + [inputs.value_of(1, 0)]
    check = inputs.check_values(values, counts)
    assert (check["duplicates"], check["gaps"], check["missing"]) == (0, 0, 15)


def test_selected_workloads() -> None:
    assert selected_workloads("") == [
        "throughput",
        "backpressure",
        "driver_kills",
        "recovery",
        "latency",
    ]
    assert selected_workloads("4, 1") == ["throughput", "recovery"]
    assert selected_workloads("5") == ["latency"]
    assert selected_workloads("driver-kills,backpressure") == ["backpressure", "driver_kills"]
    with pytest.raises(SystemExit):
        selected_workloads("6")


def _batches(name: str) -> dict[str, Any]:
    return {
        "batches": 2,
        "duration_ms_p50": 1_500.0,
        "duration_ms_p99": 2_000,
        "duration_ms_max": 2_000,
        "first_commit_s": 3.2,
        "durations_ms": [1_000, 2_000],
        **({"channel_state_bytes_per_batch": [300, 0]} if name.startswith("ours") else {}),
    }


RATES = {"peer": 100_000, "peer-tuned": 250_000, "ours": 200_000}


def _throughput(outputs: dict[str, Any]) -> dict[str, Any]:
    return {"records": 1_000, "repeats": 1, "kcat_read_records_per_s": 300_000, "outputs": outputs}


def _throughput_output(rates: dict[str, int]) -> dict[str, Any]:
    return {
        "best_records_per_s": rates,
        "best_records_per_s_in_batches": rates,
        "ours_over_peer": 2.0,
        "ours_over_peer_in_batches": 2.0,
        "ours_over_peer_tuned": 0.8,
        "ours_over_peer_tuned_in_batches": 0.8,
    }


def test_the_table_shows_each_workload_that_ran() -> None:
    report = {
        "throughput": _throughput({"kafka": _throughput_output(RATES)}),
        "backpressure": {
            "records": 1_000,
            "hot_partition_records": 500,
            "quota_bytes_per_s": 20_000,
            "throttled": {n: _batches(n) for n in ("peer", "ours aligned")},
            "slow_udf": {
                "records": 100,
                "seconds_per_row": 0.0002,
                "target_batch_duration": "2s",
                "runs": {"peer": _batches("peer")},
            },
        },
        "driver_kills": {
            "records": 1_000,
            "kill_every_s": 20,
            "kill_for_s": 600,
            "quota_bytes_per_s": 20_000,
            "contenders": {
                "peer": {"kills": 2, "seconds_to_end": 50.0, "records": 1_200},
                "ours": {"kills": 3, "seconds_to_end": 70.0, "records": 1_000},
            },
        },
    }
    for name, duplicates in (("peer", 200), ("ours", 0)):
        report["driver_kills"]["contenders"][name].update(duplicates=duplicates, missing=0)
    report["driver_kills"]["contenders"]["ours"]["exactly_once"] = True
    text = table.format_table(report)
    assert "200,000 / 200,000" in text
    assert "2.00 / 2.00" in text
    assert "150 / 300" in text  # channel state per batch: mean / max
    assert "workload 4" not in text
    ours = next(line for line in text.splitlines() if line.startswith("ours  "))
    assert ours.split()[-1] == "yes"


def test_the_throughput_block_shows_cpu_per_million_and_tiny_batches() -> None:
    cpu = {"python_workers": 1.5, "spark_jvm": 0.25, "broker": 0.5}
    floor = {
        "best_records_per_s": 300_000,
        "best_records_per_s_in_batches": 300_000,
        "ours_over_floor": 0.67,
        "ours_over_floor_in_batches": 0.67,
        "cpu_s_per_million_median": {**cpu, "python_workers": 0.75},
    }
    noop = {
        **_throughput_output(RATES),
        "cpu_s_per_million_median": {"ours": cpu},
        "floor_source": floor,
    }
    tiny = {"batch_ms_p50": 120.0, "batch_ms_p99": 300.0, "add_batch_ms_p50": 80.0}
    report = {
        "throughput": {
            **_throughput({"noop": noop}),
            "tiny_batches": {"records_per_batch": 80, "contenders": {"ours": tiny}},
        }
    }
    text = table.format_table(report)
    assert "ours 1.50 / 0.25 / 0.50; floor 0.75 / 0.25 / 0.50" in text
    assert (
        "tiny batches (80 records), ms per batch p50 / p99 (addBatch p50): ours 120 / 300 (80)"
        in text
    )


def test_the_recovery_block_shows_seconds_to_two_decimals() -> None:
    run = {"pending_rows_at_kill": 92_000, "pending_bytes_at_kill": 265_919}
    report = {
        "recovery": {
            "repeats": 2,
            "variants": {
                "ours with channel state": {
                    "restart_to_session_s": 5.635,
                    "restart_to_query_started_s": 8.995000000000001,  # a median of two
                    "restart_to_first_commit_s": 19.97,
                    "runs": [run],
                }
            },
        }
    }
    text = table.format_table(report)
    recovered = next(line for line in text.splitlines() if line.startswith("ours with"))
    assert recovered.split()[-6:] == ["5.63", "9.00", "19.97", "-", "92,000", "265,919"]


def test_the_recovery_block_shows_each_variant_over_the_peer_of_its_round() -> None:
    def variant(contender: str, seconds: list[float], peer: list[float]) -> dict[str, object]:
        runs = [
            {"restart_to_first_commit_s": x, "pending_rows_at_kill": 0, "pending_bytes_at_kill": 0}
            for x in seconds
        ]
        return {
            "contender": contender,
            "restart_to_session_s": 3.0,
            "restart_to_query_started_s": 4.0,
            "restart_to_first_commit_s": sorted(seconds)[1],
            "first_commit_over_peer_per_round": recovery.over_peer(seconds, peer),
            "runs": runs,
        }

    peer = [10.0, 8.0, 9.0]
    report = {
        "recovery": {
            "repeats": 3,
            "variants": {
                "peer": variant("peer", peer, peer),
                "floor (no-op source, sink)": variant("floor", [12.0, 9.6, 9.9], peer),
            },
        }
    }
    text = table.format_table(report)
    floor = next(line for line in text.splitlines() if line.startswith("floor"))
    assert floor.split()[-3:] == ["1.20", "0", "0"]  # rounds 1.20, 1.20, 1.10: median 1.20
    assert "  per round, floor (no-op source, sink): 1.20, 1.20, 1.10" in text
    peer_line = next(line for line in text.splitlines() if line.startswith("peer "))
    assert peer_line.split()[-3] == "1.00"


def test_latency_values_carry_their_produce_time() -> None:
    value = latency.encode(1234, 1_795_000_000_123)
    assert len(value) == inputs.VALUE_BYTES
    assert latency.decode(value) == (1234, 1_795_000_000_123)
    assert latency.decode(value + b"\n") == (1234, 1_795_000_000_123)


def test_latency_figures_leave_out_the_warm_up_and_count_the_unseen() -> None:
    produced = {0: 1_000, 1: 2_000, 2: 2_000, 3: 2_010, 4: 2_020}
    seen = {0: 1_900, 1: 2_300, 2: 2_100, 4: 3_020}  # 3 never became visible
    figures = latency.latency_figures(produced, seen, from_ms=2_000)
    assert figures == {
        "produced": 4,
        "seen": 3,
        "latency_ms_p50": 300,
        "latency_ms_p99": 1_000,
        "latency_ms_max": 1_000,
    }
    assert latency.latency_figures(produced, {}, from_ms=2_000) == {"produced": 4, "seen": 0}


def test_fixed_cost_figures_of_tiny_batches() -> None:
    reports = [
        {"numInputRows": rows, "durationMs": {"triggerExecution": total, "addBatch": add}}
        for rows, total, add in ((20, 400, 300), (30, 500, 350), (25, 450, 320))
    ]
    assert latency.fixed_cost_figures(reports) == {
        "batches": 3,
        "batch_ms_p50": 450,
        "batch_ms_p99": 500,
        "add_batch_ms_p50": 320,
        "rows_per_batch_p50": 25,
    }
    assert latency.fixed_cost_figures([]) == {"batches": 0}


def test_the_table_shows_the_latency_workload() -> None:
    contender = {
        "produced": 500_000,
        "seen": 500_000,
        "latency_ms_p50": 420,
        "latency_ms_p99": 900,
        "latency_ms_max": 1_400,
        "batch_ms_p50_steady": 380.0,
        "tiny_batches": {
            "batches": 40,
            "batch_ms_p50": 310.0,
            "batch_ms_p99": 520,
            "add_batch_ms_p50": 240.0,
            "rows_per_batch_p50": 20,
        },
    }
    report = {
        "latency": {
            "rate": 10_000,
            "seconds": 60,
            "warmup_s": 10,
            "tiny_rate": 80,
            "tiny_seconds": 20,
            "contenders": {"peer": contender, "ours aligned": {**contender, "seen": 499_000}},
        }
    }
    text = table.format_table(report)
    assert "workload 5" in text
    ours = next(line for line in text.splitlines() if line.startswith("ours aligned"))
    assert ours.split()[2:] == [
        "499,000",
        "/",
        "500,000",
        "420",
        "900",
        "1,400",
        "380",
        "310",
        "/",
        "520",
        "240",
    ]


def test_extra_spark_conf_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.compare.connectors import extra_spark_conf

    monkeypatch.setenv("UNALIGNED_BENCH_SPARK_CONF", " a.b=1, c=x=y ,")
    assert extra_spark_conf() == {"a.b": "1", "c": "x=y"}
    monkeypatch.delenv("UNALIGNED_BENCH_SPARK_CONF")
    assert extra_spark_conf() == {}
    monkeypatch.setenv("UNALIGNED_BENCH_SPARK_CONF", "no-value")
    with pytest.raises(ValueError, match="'no-value' is not key=value"):
        extra_spark_conf()
