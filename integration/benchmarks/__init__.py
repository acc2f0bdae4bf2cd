"""Benchmarks: ``python -m benchmarks [name ...]`` runs every ``bench_*.py`` module here (or the
named ones, with or without the ``bench_`` prefix). Each module has a ``main()`` that prints its
figures and writes ``integration/benchmarks/results/<name>.json``. Benchmarks are never run by
the tests and nothing asserts on their timings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def local_spark(app_name: str, cores: int = 2, log_level: str = "ERROR", **conf: str) -> Any:
    """A local SparkSession for a benchmark: ``cores`` threads and shuffle partitions, no UI or
    console progress; ``conf`` adds settings (keys with dots given as a dict: ``**{"a.b": v}``)."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def write_results(name: str, report: Mapping[str, Any]) -> Path:
    """Write ``report`` to ``integration/benchmarks/results/<name>.json`` and say where."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {path}")
    return path
