"""Workload 4: a query's first batch, new and after a restart (issue 35; before it, issue 20's
restart to the first commit).

Kafka -> Kafka, ``records`` (default 400,000) x 100 B over 8 partitions, ``maxOffsetsPerTrigger``
50,000, ``availableNow``, in two inputs: ``uniform`` (the same records in every partition) and
``skewed`` (workload 2's: half in one hot partition). Each query runs in a process of its own
(:mod:`.query_process`), in each Spark set-up of :mod:`.opt_ins` (as shipped; with both start-up
opt-ins applied by ``unaligned tune-spark`` to a copy of the Spark home):

- ``new query``: from an empty checkpoint to the end of the input;
- ``restart``: a query from an empty checkpoint, its output throttled as in workload 2, is
  SIGKILLed (driver, JVM and Python workers) right after its first commit (for the variant with
  channel state: a commit that left channel state pending), then started again on the same
  checkpoint with the throttle lifted and run to the end of the input.

From the launch of the measured process and its progress reports
(:func:`.progress.start_figures`): seconds to its Spark session, to ``start()`` returning, to
the end of its first batch (its first commit), and ``addBatch`` of its first three batches.
Variants: the peer (Spark's ``format("kafka")`` both ends, at-least-once), ours (exactly-once,
default options: no channel state at these batch times), the floor (a Python source and sink that
do no work, :func:`.query_process.floor_to_floor`: what any Python Data Source pipeline pays), and,
for the skewed input's restart only, ours with channel state pending at the kill
(``alignedCheckpointTimeout`` 1 s). Every variant and set-up takes its turn in each of
``repeats`` rounds; the figures are medians, and the first commit's ratios (ours/floor,
ours/peer, floor/peer) are taken within each round, then their median.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.compare import connectors, query_process
from benchmarks.compare.inputs import PARTITIONS, produce, skewed_counts, uniform_counts
from benchmarks.compare.opt_ins import Setup
from benchmarks.compare.progress import start_figures
from benchmarks.floor_source import FORMAT as FLOOR_FORMAT
from unaligned.checkpoint import Checkpoint

MAX_OFFSETS = 50_000
LIMIT_S = 300.0
FLOOR = connectors.Connector("floor", FLOOR_FORMAT)
INPUTS = {"uniform": uniform_counts, "skewed": skewed_counts}
STARTS = ("new query", "restart")
VARIANTS: dict[str, tuple[connectors.Connector, dict[str, str]]] = {
    "peer": (connectors.PEER, {}),
    "ours": (connectors.OURS, {}),
    "floor": (FLOOR, {}),
    "ours, channel state pending": (connectors.OURS, {"alignedCheckpointTimeout": "1s"}),
}
WITH_STATE = "ours, channel state pending"
MEDIANS = (
    "session_s",
    "query_started_s",
    "batch_0_add_batch_s",
    "first_commit_s",
    "batch_1_add_batch_s",
    "batch_2_add_batch_s",
)
RATIOS = (
    ("ours/floor", "ours", "floor"),
    ("ours/peer", "ours", "peer"),
    ("floor/peer", "floor", "peer"),
)


def variants_of(input_name: str, start: str) -> list[str]:
    """The variants of one input and start (channel state: the skewed input's restart only)."""
    with_state = input_name == "skewed" and start == "restart"
    return [name for name in VARIANTS if name != WITH_STATE or with_state]


def _pending(checkpoint: Path) -> tuple[int, int]:
    """Rows and bytes of channel state pending after the newest commit record."""
    from unaligned.inspection.checkpoint_view import build_view

    pending = build_view(Checkpoint.resolve(str(checkpoint))).pending
    if pending is None:
        return 0, 0
    return pending.rows, sum(t.bytes for t in pending.tasks)


def _kill_after_commit(config: dict[str, Any], checkpoint: Path, name: str, log: Any) -> None:
    """Run until a batch commits (with channel state pending, for :data:`WITH_STATE`), kill."""
    proc = query_process.start(config, log)
    after = -1
    try:
        while True:
            if query_process.wait_for_batch(checkpoint, after, proc, LIMIT_S, "commits") is None:
                raise RuntimeError(f"{name}: no commit to kill after; see {log.name}")
            after = max(query_process.logged_batches(checkpoint))
            if name != WITH_STATE or _pending(checkpoint)[0] > 0:
                return
    finally:
        query_process.kill(proc)


def _measured(config: dict[str, Any], work: Path, tag: str, log: Any) -> dict[str, Any]:
    """Launch the query process of ``config``, wait for it to end; its start-up figures."""
    events, progress = work / f"{tag}.events", work / f"{tag}.progress"
    config = {**config, "events": str(events), "progress": str(progress)}
    launched = time.time()
    proc = query_process.start(config, log)
    try:
        proc.wait(timeout=LIMIT_S)
    finally:
        query_process.kill(proc)
    if proc.returncode != 0 or not progress.exists():
        raise RuntimeError(f"{tag}: the query process failed ({proc.returncode}); see {log.name}")
    return start_figures(
        json.loads(progress.read_text()), launched, query_process.read_events(events)
    )


def _variant(
    kafka: Any, work: Path, run: tuple[Setup, str, str], topic: str, records: int, settings: Any
) -> dict[str, Any]:
    """One measured start of one variant: ``run`` is (set-up, start, variant), ``settings``
    (quota, jars) the throttle of a restart's first run and the peer's ``spark.jars``."""
    setup, start, name = run
    quota, jars = settings
    connector, options = VARIANTS[name]
    output = f"startup-out-{time.monotonic_ns()}"
    checkpoint = work / f"checkpoint-{output}"
    if connector is FLOOR:
        config = query_process.floor_to_floor(checkpoint, MAX_OFFSETS, records)
    else:
        kafka.create_topic(output, partitions=PARTITIONS)
        config = query_process.kafka_to_kafka(
            connector,
            kafka.bootstrap_servers,
            topic,
            output,
            checkpoint,
            MAX_OFFSETS,
            options,
            jars,
        )
    config = query_process.with_setup(config, setup)
    rows, state_bytes = 0, 0
    with open(work / f"{output}.log", "w") as log:
        if start == "restart":
            kafka.throttle_producers_together(quota)
            try:
                _kill_after_commit(config, checkpoint, name, log)
            finally:
                kafka.throttle_producers_together(None)
            if connector.exactly_once:
                rows, state_bytes = _pending(checkpoint)
        figures = _measured(config, work, output, log)
    if connector is not FLOOR:
        kafka.delete_topic(output)
    return {**figures, "pending_rows_at_kill": rows, "pending_bytes_at_kill": state_bytes}


def ratios(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The first commit's ratios within each round (module docstring), and their median."""
    out = {}
    for label, over, under in RATIOS:
        per_round = [
            round(a["first_commit_s"] / b["first_commit_s"], 2)
            for a, b in zip(runs[over], runs[under], strict=True)
        ]
        out[label] = {"per_round": per_round, "median": statistics.median(per_round)}
    return out


def _median(values: Sequence[float | None]) -> float | None:
    """The median of the values a run has (``None``: a batch the run did not reach)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summary(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Medians per variant, and the ratios of :func:`ratios`."""
    variants = {
        name: {
            **{k: _median([r[k] for r in rs]) for k in MEDIANS},
            "runs": list(rs),
        }
        for name, rs in runs.items()
    }
    return {"variants": variants, "first_commit_ratios": ratios(runs)}


def run(
    kafka: Any,
    work: Path,
    records: int,
    quota: int,
    jars: str,
    repeats: int,
    chosen: tuple[Sequence[Setup], Sequence[str]],
    inputs: Sequence[str],
) -> dict[str, Any]:
    """Workload 4 (module docstring) in the ``chosen`` set-ups and starts (of :data:`STARTS`);
    returns its figures and prints each run."""
    setups, starts = chosen
    topics = {}
    for input_name in inputs:
        topics[input_name] = f"startup-{input_name}-{records}"
        kafka.create_topic(topics[input_name], partitions=PARTITIONS)
        produce(kafka.bootstrap_servers, topics[input_name], INPUTS[input_name](records))
    print(f"workload 4: a query's first batch, new and restarted ({records:,} records)", flush=True)
    runs: dict[tuple[str, str, str], dict[str, list[dict[str, Any]]]] = {}
    for _ in range(repeats):
        for input_name in inputs:
            for setup in setups:
                for start in starts:
                    key = (input_name, setup.name, start)
                    for name in variants_of(input_name, start):
                        r = _variant(
                            kafka,
                            work,
                            (setup, start, name),
                            topics[input_name],
                            records,
                            (quota, jars),
                        )
                        runs.setdefault(key, {}).setdefault(name, []).append(r)
                        print(
                            f"  {input_name}, {setup.name}, {start}, {name:<27} session "
                            f"{r['session_s']:>5} s, start() {r['query_started_s']:>5} s, batch "
                            f"{r['first_batch_id']} addBatch {r['batch_0_add_batch_s']:>5} s, "
                            f"committed {r['first_commit_s']:>5} s, then addBatch "
                            f"{r['batch_1_add_batch_s']} / {r['batch_2_add_batch_s']} s "
                            f"(pending at the kill: {r['pending_rows_at_kill']:,} rows)",
                            flush=True,
                        )
    for topic in topics.values():
        kafka.delete_topic(topic)
    results: dict[str, Any] = {}
    for (input_name, setup_name, start), variant_runs in runs.items():
        results.setdefault(input_name, {}).setdefault(setup_name, {})[start] = summary(variant_runs)
    return {
        "records": records,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "quota_bytes_per_s": quota,
        "repeats": repeats,
        "inputs": results,
    }
