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


def test_start_figures_count_from_the_launch() -> None:
    reports = [
        {
            "batchId": 3,
            "timestamp": "2026-01-01T00:00:10.000Z",
            "durationMs": {"triggerExecution": 2_500, "addBatch": 1_750},
        },
        {
            "batchId": 4,
            "timestamp": "2026-01-01T00:00:12.500Z",
            "durationMs": {"triggerExecution": 900, "addBatch": 600},
        },
    ]
    launched = progress.epoch_s("2026-01-01T00:00:02.000Z")
    events = {"session": launched + 4.004, "started": launched + 6.5}
    figures = progress.start_figures(reports, launched, events)
    assert figures == {
        "session_s": 4.0,
        "query_started_s": 6.5,
        "first_batch_id": 3,
        "batch_0_add_batch_s": 1.75,
        "first_commit_s": 10.5,
        "batch_1_add_batch_s": 0.6,
        "batch_2_add_batch_s": None,
        "batches": 2,
    }


def _start_run(first_commit_s: float, pending: int = 0) -> dict[str, Any]:
    return {
        "session_s": 3.0,
        "query_started_s": 4.0,
        "first_batch_id": 0,
        "batch_0_add_batch_s": 2.0,
        "first_commit_s": first_commit_s,
        "batch_1_add_batch_s": 0.5,
        "batch_2_add_batch_s": 0.4,
        "batches": 8,
        "pending_rows_at_kill": pending,
        "pending_bytes_at_kill": 0,
    }


def test_start_ratios_are_taken_within_each_round() -> None:
    runs = {
        "peer": [_start_run(10.0), _start_run(8.0), _start_run(9.0)],
        "ours": [_start_run(12.0), _start_run(10.0), _start_run(9.0)],
        "floor": [_start_run(11.0), _start_run(8.0), _start_run(9.9)],
    }
    summary = recovery.summary(runs)
    assert summary["variants"]["ours"]["first_commit_s"] == 10.0
    ratios = summary["first_commit_ratios"]
    assert ratios["ours/peer"] == {"per_round": [1.2, 1.25, 1.0], "median": 1.2}
    assert ratios["ours/floor"]["per_round"] == [1.09, 1.25, 0.91]
    assert ratios["floor/peer"]["median"] == 1.1


def test_the_recovery_block_shows_each_start_with_its_ratios() -> None:
    runs = {
        "peer": [_start_run(10.0)],
        "ours": [_start_run(12.5)],
        "floor": [_start_run(11.0)],
        "ours, channel state pending": [{**_start_run(13.0, 92_000), "batch_2_add_batch_s": None}],
    }
    report = {
        "recovery": {
            "repeats": 1,
            "inputs": {"skewed": {"opt-ins": {"restart": recovery.summary(runs)}}},
        }
    }
    text = table.format_table(report)
    assert "workload 4, skewed input, opt-ins, restart: seconds from the launch" in text
    ours = next(line for line in text.splitlines() if line.startswith("ours "))
    assert ours.split()[1:] == ["3.00", "4.00", "2.00", "12.50", "0.50", "/", "0.40", "-"]
    state = next(line for line in text.splitlines() if line.startswith("ours, channel"))
    assert state.split()[-4:] == ["0.50", "/", "-", "92,000"]  # no third batch after the restart
    assert "  ours/floor 1.14 (rounds 1.14)" in text
    assert "  floor/peer 1.10 (rounds 1.10)" in text


def test_only_the_skewed_restart_has_the_channel_state_variant() -> None:
    assert recovery.WITH_STATE in recovery.variants_of("skewed", "restart")
    assert recovery.WITH_STATE not in recovery.variants_of("skewed", "new query")
    assert recovery.WITH_STATE not in recovery.variants_of("uniform", "restart")


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


def _pyspark_home(root: Any, tuned: bool) -> Any:
    """A pyspark directory with its zips (``tuned``: with the ``<zip>.orig`` of tune-spark)."""
    lib = root / "python" / "lib"
    lib.mkdir(parents=True)
    (root / "jars").mkdir()
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"tuned" if tuned else b"shipped")
        if tuned:
            (lib / (name + ".orig")).write_bytes(b"shipped")
    return root


def test_the_daemon_setup_alone_builds_no_spark_home(tmp_path: Any, monkeypatch: Any) -> None:
    from benchmarks.compare import opt_ins

    installed = _pyspark_home(tmp_path / "pyspark", tuned=False)
    monkeypatch.setattr(opt_ins, "pyspark_home", lambda: installed)
    shipped, daemon = opt_ins.setups(["daemon", "shipped"], tmp_path / "home")
    assert (shipped.name, shipped.spark_home, dict(shipped.spark_conf)) == ("as shipped", "", {})
    assert daemon.spark_home == ""
    assert dict(daemon.spark_conf) == {
        "spark.python.daemon.module": "unaligned.tuning.preloading_daemon"
    }
    assert not (tmp_path / "home").exists()


def test_as_shipped_runs_on_the_original_zips_of_a_tuned_installation(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """``./dev test`` tunes this checkout's pyspark: "as shipped" must not measure that."""
    from benchmarks.compare import opt_ins

    installed = _pyspark_home(tmp_path / "pyspark", tuned=True)
    monkeypatch.setattr(opt_ins, "pyspark_home", lambda: installed)
    shipped, daemon = opt_ins.setups(["daemon", "shipped"], tmp_path / "home")
    home = tmp_path / "home" / "shipped"
    assert shipped.spark_home == daemon.spark_home == str(home)
    lib = home / "python" / "lib"
    assert sorted(p.name for p in lib.iterdir()) == ["py4j-0.10.9.9-src.zip", "pyspark.zip"]
    assert all(p.read_bytes() == b"shipped" for p in lib.iterdir())
    assert (home / "jars").is_symlink()
