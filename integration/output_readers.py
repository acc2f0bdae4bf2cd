"""The readers of a file sink's output that are not ours, and what "whole batches" means for them.

Each reader returns the ``value`` column of every row it reads under the output path:
Spark's ``read.parquet`` (the test session: another application than the query's),
``pyarrow.dataset``, ``pandas.read_parquet``, DuckDB over ``path/*.parquet`` and over
``path/**/*.parquet``, and polars over ``path/**/*.parquet`` (polars refuses a bare directory
that holds ``_spark_metadata``, as for any Spark file sink's output). Shared by
:mod:`test_sink_crash_matrix` (after each crash) and :mod:`test_file_sink_readers` (during
running batches).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from unaligned._util.fs import resolve_location
from unaligned.sink.files.committed_files import manifest_entries

Values = list[bytes]


def _nothing_yet(output: Path) -> bool:
    """No data file at the top yet: readers would find no schema to read."""
    return not any(output.glob("*.parquet"))


def _spark(output: Path, spark: Any) -> Values:
    from pyspark.errors import AnalysisException

    if _nothing_yet(output):
        return []
    try:
        rows = spark.read.parquet(str(output)).select("value").collect()
    except AnalysisException as exc:
        if "UNABLE_TO_INFER_SCHEMA" in str(exc):  # a log that names no file yet
            return []
        raise
    return [bytes(row.value) for row in rows]


def _pyarrow(output: Path, spark: Any) -> Values:
    import pyarrow.dataset as ds

    if _nothing_yet(output):
        return []
    return list(ds.dataset(output).to_table(columns=["value"]).column("value").to_pylist())


def _pandas(output: Path, spark: Any) -> Values:
    import pandas as pd

    if _nothing_yet(output):
        return []
    return list(pd.read_parquet(output, columns=["value"])["value"])


def _duckdb(pattern: str) -> Callable[[Path, Any], Values]:
    def read(output: Path, spark: Any) -> Values:
        import duckdb

        with duckdb.connect() as connection:
            sql = f"SELECT value FROM read_parquet('{output}/{pattern}')"
            try:
                return [bytes(row[0]) for row in connection.execute(sql).fetchall()]
            except duckdb.IOException as exc:
                if "No files found" in str(exc):
                    return []
                raise

    return read


def _polars(output: Path, spark: Any) -> Values:
    import polars as pl

    if not list(output.rglob("*.parquet")):
        return []  # polars refuses a glob that matches nothing
    return list(pl.read_parquet(f"{output}/**/*.parquet", columns=["value"])["value"])


READERS: dict[str, Callable[[Path, Any], Values]] = {
    "spark read.parquet": _spark,
    "pyarrow.dataset": _pyarrow,
    "pandas": _pandas,
    "duckdb *.parquet": _duckdb("*.parquet"),
    "duckdb **/*.parquet": _duckdb("**/*.parquet"),
    "polars **/*.parquet": _polars,
}
LISTING_READERS = [name for name in READERS if name != "spark read.parquet"]


def read_all(output: Path, spark: Any) -> dict[str, Values]:
    """What every reader sees now."""
    return {name: read(output, spark) for name, read in READERS.items()}


def committed_files(output: Path) -> dict[int, dict[str, Values]]:
    """Batch -> committed file -> its values, from the manifest (after the query finished)."""
    batches: dict[int, dict[str, Values]] = defaultdict(dict)
    for entry in manifest_entries(resolve_location(str(output))):
        for file in entry.files:
            table = pq.read_table(output / file.path, columns=["value"])
            batches[entry.batch_id][file.path] = list(table.column("value").to_pylist())
    return dict(batches)


def batches_seen(
    values: Iterable[bytes], batches: dict[int, dict[str, Values]]
) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """Which batches ``values`` holds whole, and ``{batch: (files seen, files)}`` of those it
    holds in part. Fails on a duplicate row, a row of no committed file, or a file seen in part
    (every file appears whole or not at all)."""
    counted = Counter(values)
    duplicates = [v for v, n in counted.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} rows read twice, e.g. {duplicates[:3]}"
    remaining = set(counted)
    whole: list[int] = []
    partial: dict[int, tuple[int, int]] = {}
    for batch_id, files in sorted(batches.items()):
        seen = 0
        for name, rows in files.items():
            present = [v in remaining for v in rows]
            assert all(present) or not any(present), f"file {name} read in part"
            if all(present) and rows:
                seen += 1
                remaining.difference_update(rows)
        if seen == len(files):
            whole.append(batch_id)
        elif seen:
            partial[batch_id] = (seen, len(files))
    assert not remaining, (
        f"{len(remaining)} rows of no committed file, e.g. {sorted(remaining)[:3]}"
    )
    return whole, partial
