"""Thousands of micro-batches with every barrier cutting: does anything grow?

Run: ``python -m benchmarks endurance`` (``./dev bench endurance``). Prints the figures and
writes ``integration/benchmarks/results/endurance.json``. ``UNALIGNED_BENCH_ENDURANCE_BATCHES``
sets the batch count (default 2,100), ``UNALIGNED_BENCH_ENDURANCE_SINKS`` the sinks (``kafka``,
``files``, ``files-retention``; all by default).

Setup: one embedded broker, Spark ``local[2]`` in this process. The input topic (8 partitions)
holds more records than the run reads (``BACKLOG_RECORDS_PER_BATCH`` per batch, 100-byte
values); each query reads it with ``format("unaligned")``, ``maxOffsetsPerTrigger=1100`` and
the default trigger (the next batch as soon as the last one ends), and writes ``key``,
``value``, ``partition`` with ``format("unaligned")`` to an 8-partition topic or, for ``files``,
to Parquet (``path``; ``files-retention`` also with ``retention`` 60 s, so the output's
``_spark_metadata`` compactions keep a minute of batches). Sink options:
``alignedCheckpointTimeout=0`` (every barrier is past its deadline once a task wrote its first
chunk) and ``chunkRows=500``: each of the 2 sink tasks
writes one chunk a barrier, 1,000 rows, a little less than the 1,100 the source offers. So
every barrier cuts, the rest of each task's input becomes channel state, the next barrier
replays it first, and the source's backlog limit (``source/planning/backlog_limit.py``) halves its
batch whenever the pending rows grew. ``channelStateInlineThreshold=0``: every cut writes a state
file (with the default 20 KiB this load's state goes inline into the records, and no file or
garbage collection is exercised). Everything else is the default (``channelStateMaxFiles`` 8,
``channelStateMergeBelow`` 16 MiB, ``minBatchesToRetain`` 100).

Sampled while the query runs, at every ``SAMPLE_EVERY`` batches (the table shows 100, 1,000
and 2,000): the checkpoint's files and bytes; the channel-state directory's files and bytes
(``<checkpoint>/unaligned/channel-state``); the newest commit record
(:class:`unaligned.sink.commit_log.CommitLog`): its batch, its size, the pending refs it lists
and their rows still to replay; and for ``files`` the output's ``_unaligned_manifest`` and
``_spark_metadata``. Per-batch driver time comes from Spark's progress (``durationMs``, every
batch, polled from ``recentProgress``): planning (``latestOffset`` + ``queryPlanning``), the
offset log (``walCommit``), the batch (``addBatch``, which includes the sink's ``commit``),
Spark's commit log (``commitOffsets``) and the whole trigger; the sink's own commit time is the
done markers' ``commitMs``. Each is the median of the ``SAMPLE_EVERY`` batches up to the mark;
the slope (least squares, ms per 1,000 batches) is over every batch from ``SLOPE_FROM`` on;
every batch's durations are in the JSON (``duration_ms``).
Exactly-once is not checked here (the integration tests do); the figures are for growth only.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results
from benchmarks.compare.inputs import PARTITIONS, prepare_process, produce, uniform_counts

DEFAULT_BATCHES = 2_100
MAX_OFFSETS = 1_100
RETENTION = "60s"
CHUNK_ROWS = 500
BACKLOG_RECORDS_PER_BATCH = MAX_OFFSETS
EXTRA_OPTIONS = {"files-retention": {"retention": RETENTION}}
SAMPLE_EVERY = 100
SLOPE_FROM = 300
MARKS = (100, 1_000, 2_000)
TIMINGS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
SINKS = ("kafka", "files", "files-retention")
SINK_OPTIONS = {
    "alignedCheckpointTimeout": "0",
    "chunkRows": str(CHUNK_ROWS),
    "channelStateInlineThreshold": "0",
}


def _tree(path: Path) -> tuple[int, int]:
    """Files and bytes under ``path`` (files that vanish while it is walked are skipped)."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += (Path(root) / name).stat().st_size
            except FileNotFoundError:
                continue
            files += 1
    return files, size


def _newest_record(checkpoint: Path) -> dict[str, Any]:
    """The newest commit record: batch, size, pending refs and rows (retried over a prune)."""
    from unaligned.channel_state.refs import FileChannelState
    from unaligned.checkpoint import Checkpoint
    from unaligned.sink.commit_log import CommitLog

    cp = Checkpoint.resolve(str(checkpoint))
    log = CommitLog(cp)
    for _ in range(5):
        decided = log.decided_batch_ids()
        if not decided:
            return {}
        try:
            record = log.read(decided[-1])
            size = (
                cp.commit_record(decided[-1])
                .filesystem.get_file_info(cp.commit_record(decided[-1]).path)
                .size
            )
        except Exception:  # pruned or replaced while read: the next one
            continue
        if record is None:
            continue
        refs = [ref for refs in record.channel_state.values() for ref in refs]
        commit_ms = []
        for batch_id in log.done_batch_ids()[-SAMPLE_EVERY:]:
            try:
                info = log.done_info(batch_id)
            except Exception:
                continue
            if info and "commitMs" in info:
                commit_ms.append(float(info["commitMs"]))
        return {
            "record_batch": record.batch_id,
            "record_bytes": size,
            "pending_refs": len(refs),
            "pending_file_refs": sum(1 for r in refs if isinstance(r, FileChannelState)),
            "pending_rows": sum(r.remaining_rows for r in refs),
            "sink_commit_ms_p50": statistics.median(commit_ms) if commit_ms else None,
        }
    return {}


def _sample(checkpoint: Path, output: Path | None, batch: int) -> dict[str, Any]:
    files, size = _tree(checkpoint)
    state_files, state_bytes = _tree(checkpoint / "unaligned" / "channel-state")
    sample: dict[str, Any] = {
        "batch": batch,
        "checkpoint_files": files,
        "checkpoint_bytes": size,
        "channel_state_files": state_files,
        "channel_state_bytes": state_bytes,
        **_newest_record(checkpoint),
    }
    if output is not None:
        sample["manifest_files"], sample["manifest_bytes"] = _tree(output / "_unaligned_manifest")
        sample["spark_log_files"], sample["spark_log_bytes"] = _tree(output / "_spark_metadata")
    return sample


class ProgressTail:
    """Every batch's progress of a running query: ``recentProgress`` (the newest 100) polled
    often enough to miss none, deduplicated by batch id."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.by_batch: dict[int, dict[str, Any]] = {}

    def poll(self) -> int:
        """Take what is new; returns the newest batch id seen (-1: none yet)."""
        for p in self.query.recentProgress:
            self.by_batch.setdefault(int(p["batchId"]), p)
        return max(self.by_batch, default=-1)


def _median_timings(progress: Mapping[int, dict[str, Any]], upto: int) -> dict[str, float]:
    window = [progress[b] for b in range(upto - SAMPLE_EVERY + 1, upto + 1) if b in progress]
    result: dict[str, float] = {}
    for key in (*TIMINGS, "triggerExecution"):
        values = [float(p["durationMs"].get(key, 0)) for p in window]
        result[f"{key}_ms_p50"] = statistics.median(values) if values else 0.0
    planning = [
        float(p["durationMs"].get("latestOffset", 0))
        + float(p["durationMs"].get("queryPlanning", 0))
        for p in window
    ]
    result["planning_ms_p50"] = statistics.median(planning) if planning else 0.0
    rows = [int(p["numInputRows"]) for p in window]
    result["input_rows_p50"] = statistics.median(rows) if rows else 0
    return result


def slope_per_1000(points: Sequence[tuple[int, float]]) -> float | None:
    """Least-squares slope of ``(batch, value)`` points, in value per 1,000 batches."""
    if len(points) < 2:
        return None
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    return round(1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var, 2)


def _run(spark: Any, kafka: Any, topic: str, sink: str, work: Path, batches: int) -> dict[str, Any]:
    checkpoint = work / f"checkpoint-{sink}"
    output = work / f"output-{sink}" if sink.startswith("files") else None
    source = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS))
        .load()
        .select("key", "value", "partition")
    )
    writer = source.writeStream.format("unaligned").option("checkpointLocation", str(checkpoint))
    if output is None:
        out_topic = f"endurance-out-{int(time.time())}"
        kafka.create_topic(out_topic, partitions=PARTITIONS)
        writer = writer.option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        writer = writer.option("topic", out_topic)
    else:
        writer = writer.option("path", str(output))
    for key, value in {**SINK_OPTIONS, **EXTRA_OPTIONS.get(sink, {})}.items():
        writer = writer.option(key, value)
    started = time.monotonic()
    query = writer.start()
    tail = ProgressTail(query)
    samples: list[dict[str, Any]] = []
    next_mark = SAMPLE_EVERY
    try:
        while True:
            newest = tail.poll()
            if newest + 1 >= next_mark:
                sample = _sample(checkpoint, output, newest + 1)
                sample["wall_s"] = round(time.monotonic() - started, 1)
                samples.append(sample)
                print(_line(sink, sample), flush=True)
                next_mark += SAMPLE_EVERY
            if newest + 1 >= batches:
                break
            if query.exception() is not None:
                raise RuntimeError(f"the {sink} query failed: {query.exception()}")
            time.sleep(1.0)
    finally:
        query.stop()
    tail.poll()
    progress = tail.by_batch
    for sample in samples:
        sample.update(_median_timings(progress, min(sample["batch"], max(progress)) - 1))
    slopes = {
        key: slope_per_1000(
            [
                (b, float(p["durationMs"].get(key, 0)))
                for b, p in sorted(progress.items())
                if b >= SLOPE_FROM
            ]
        )
        for key in (*TIMINGS, "triggerExecution")
    }
    slopes["checkpoint_bytes"] = slope_per_1000(
        [(s["batch"], s["checkpoint_bytes"]) for s in samples if s["batch"] >= SLOPE_FROM]
    )
    slopes["record_bytes"] = slope_per_1000(
        [(s["batch"], s.get("record_bytes", 0)) for s in samples if s["batch"] >= SLOPE_FROM]
    )
    return {
        "sink": sink,
        "batches": len(progress),
        "missing_progress": batches - len([b for b in progress if b < batches]),
        "input_rows": sum(int(p["numInputRows"]) for p in progress.values()),
        "wall_s": round(time.monotonic() - started, 1),
        "samples": samples,
        "slopes_per_1000_batches": slopes,
        "duration_ms": {
            key: [int(p["durationMs"].get(key, 0)) for _, p in sorted(progress.items())]
            for key in (*TIMINGS, "triggerExecution")
        },
    }


def _line(sink: str, s: Mapping[str, Any]) -> str:
    return (
        f"{sink:>5} batch {s['batch']:>5}: checkpoint {s['checkpoint_files']:>5} files "
        f"{s['checkpoint_bytes'] / 1e3:>8.1f} kB | channel state {s['channel_state_files']:>3} "
        f"files {s['channel_state_bytes'] / 1e3:>8.1f} kB | record {s.get('record_bytes', 0):>6} "
        f"B, {s.get('pending_refs', 0):>2} refs, {s.get('pending_rows', 0):>6} rows pending"
    )


def _table(result: Mapping[str, Any]) -> None:
    by_batch = {s["batch"]: s for s in result["samples"]}
    columns = [
        ("checkpoint files", "checkpoint_files", 1),
        ("checkpoint kB", "checkpoint_bytes", 1e3),
        ("channel-state files", "channel_state_files", 1),
        ("channel-state kB", "channel_state_bytes", 1e3),
        ("newest record B", "record_bytes", 1),
        ("pending refs", "pending_refs", 1),
        ("pending rows", "pending_rows", 1),
        ("planning ms (p50)", "planning_ms_p50", 1),
        ("walCommit ms", "walCommit_ms_p50", 1),
        ("addBatch ms", "addBatch_ms_p50", 1),
        ("sink commit ms", "sink_commit_ms_p50", 1),
        ("commitOffsets ms", "commitOffsets_ms_p50", 1),
        ("trigger ms", "triggerExecution_ms_p50", 1),
        ("input rows/batch", "input_rows_p50", 1),
    ]
    marks = [m for m in MARKS if m in by_batch] or sorted(by_batch)[:3]
    print(f"-- {result['sink']} sink: {result['batches']} batches in {result['wall_s']} s")
    print(f"{'':<22}" + "".join(f"{'batch ' + str(m):>14}" for m in marks))
    for label, key, scale in columns:
        cells = []
        for m in marks:
            value = by_batch[m].get(key)
            cells.append(f"{'-' if value is None else round(value / scale, 1):>14}")
        print(f"{label:<22}" + "".join(cells))
    print(
        f"slopes per 1,000 batches (from batch {SLOPE_FROM}): {result['slopes_per_1000_batches']}"
    )


def main() -> dict[str, Any]:
    prepare_process()
    from unaligned.testing import EmbeddedKafka

    batches = int(os.environ.get("UNALIGNED_BENCH_ENDURANCE_BATCHES", DEFAULT_BATCHES))
    sinks = [
        s.strip()
        for s in os.environ.get("UNALIGNED_BENCH_ENDURANCE_SINKS", ",".join(SINKS)).split(",")
        if s.strip()
    ]
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-endurance-") as tmp,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        topic = "endurance-in"
        kafka.create_topic(topic, partitions=PARTITIONS)
        records = (batches + 200) * BACKLOG_RECORDS_PER_BATCH
        produce_s = produce(kafka.bootstrap_servers, topic, uniform_counts(records))
        print(f"produced {records:,} records in {produce_s:.1f} s", flush=True)
        spark = local_spark("bench-endurance", 2, log_level="ERROR")
        try:
            for sink in sinks:
                results.append(_run(spark, kafka, topic, sink, Path(tmp), batches))
        finally:
            spark.stop()
    for result in results:
        _table(result)
    report = {
        "benchmark": "endurance",
        "batches": batches,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "sink_options": SINK_OPTIONS,
        "sample_every": SAMPLE_EVERY,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "results": results,
    }
    write_results("endurance", report)
    return report


if __name__ == "__main__":
    main()
