"""The secured benchmark's summary: best of the rounds, SASL_SSL over plaintext per contender,
ours over the peer per listener."""

from __future__ import annotations

from benchmarks.bench_secured import summarise


def test_summary_ratios() -> None:
    runs = [
        {"workload": "source", "contender": c, "listener": lis, "records_per_s_wall": v}
        for c, lis, v in (
            ("peer", "plaintext", 100),
            ("peer", "sasl_ssl", 80),
            ("ours", "plaintext", 120),
            ("ours", "sasl_ssl", 90),
            ("ours", "sasl_ssl", 102),  # a second round: the best counts
        )
    ]
    summary = summarise(runs)
    assert summary["best_records_per_s_wall"]["source"]["ours"]["sasl_ssl"] == 102
    ratios = summary["ratios"]["source"]
    assert ratios["sasl_ssl_over_plaintext"] == {"peer": 0.8, "ours": 0.85}
    assert ratios["ours_over_peer"] == {"plaintext": 1.2, "sasl_ssl": 1.275}
