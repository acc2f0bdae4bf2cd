"""``unaligned inspect <file sink output>`` without ``--json``: the
:class:`~unaligned.sink.files.output_survey.OutputSurvey` as text (queries, orphans, expired
files)."""

from __future__ import annotations

from unaligned.inspection import formatting as fmt
from unaligned.inspection.text import table
from unaligned.sink.files.output_survey import DataFile, OutputSurvey

QUERY_HEADERS = (
    "query id",
    "batches",
    "first",
    "last",
    "files",
    "rows",
    "expired",
    "orphans",
    "staged batches",
)


def _batch(value: int | None) -> str:
    return fmt.UNKNOWN if value is None else str(value)


def _files_table(found: tuple[DataFile, ...]) -> str:
    return table(
        ("batch", "file", "bytes", "modified (UTC)"),
        [(str(f.batch_id), f.name, fmt.size(f.bytes), fmt.timestamp(f.modified_ms)) for f in found],
    )


def render_output_text(survey: OutputSurvey) -> str:
    """The whole report, ending with a newline."""
    log = (
        f"{survey.spark_log_files} files; Spark's readers see {survey.spark_log_entries} data files"
        if survey.spark_log_files
        else "none (Spark's readers list the directory)"
    )
    parts = [f"output           {survey.path}", f"_spark_metadata  {log}"]
    parts.append(f"\nQueries ({len(survey.queries)})")
    rows = [
        (
            q.query_id,
            str(len(q.committed_batches)),
            _batch(q.committed_batches[0] if q.committed_batches else None),
            _batch(q.committed_batches[-1] if q.committed_batches else None),
            str(q.committed_files),
            str(q.committed_rows),
            str(len(q.expired)),
            str(len(q.orphans)),
            ", ".join(map(str, q.staged_batches)) or "none",
        )
        for q in survey.queries
    ]
    parts.append(table(QUERY_HEADERS, rows) if rows else "  none")
    orphans = survey.orphans
    parts.append(
        f"\nOrphans ({len(orphans)}): data files that no manifest and no _spark_metadata name"
    )
    if orphans:
        for query in survey.queries:
            if query.orphans:
                parts.append(f"  query {query.query_id}")
                parts.append(_files_table(query.orphans))
        parts.append(
            "  Readers that list the directory (pyarrow, pandas, DuckDB, polars) read them.\n"
            "  A query that crashed while committing leaves the same: restart it from its\n"
            "  checkpoint and its recovery publishes them. If its checkpoint is gone, remove\n"
            "  them (and its staged files) with:\n"
            f"    unaligned remove-orphans {survey.path} --query <query id>"
        )
    else:
        parts.append("  none")
    expired = [q for q in survey.queries if q.expired]
    if expired:
        total = sum(len(q.expired) for q in expired)
        parts.append(
            f"\nExpired ({total}): files of batches the sink's retention left out of the "
            "manifest and _spark_metadata; readers that list the directory still read them "
            "(remove-orphans --expired deletes them)"
        )
        for query in expired:
            parts.append(f"  query {query.query_id} (batches through {query.expired_through})")
            parts.append(_files_table(query.expired))
    if survey.other_files:
        parts.append(
            f"\nOther .parquet files ({len(survey.other_files)}), not named by this sink: "
            + ", ".join(survey.other_files[:10])
            + (" ..." if len(survey.other_files) > 10 else "")
        )
    return "\n".join(parts) + "\n"
