"""``unaligned demo``: the whole story on the embedded broker, in a couple of minutes.

1. Start the embedded Kafka broker and produce a skewed data set: half the records in
   partition 0 (the hot partition), the rest spread over the others; values of about 1 kB.
2. Throttle the broker's producers, so that the sink's task for the hot partition cannot write
   its share of a batch within ``alignedCheckpointTimeout`` (1 s): barriers are cut, and the rows
   still in flight are spilled as channel state and replayed at the next barrier.
3. Run Kafka -> ``format("unaligned")`` -> exactly-once Kafka sink in a process of its own
   (:mod:`unaligned.demo.query_run`), showing each barrier as it commits.
4. Once a barrier has left channel state pending, kill that process hard (SIGKILL of the driver,
   its JVM and every Python worker) and start it again from the same checkpoint.
5. The bounded input ends with EndOfData and the final checkpoint, which writes everything still
   pending; the query stops by itself (``unaligned.await_finished``).
6. Read the output back with an independent read_committed consumer and print the summary:
   records, barriers aligned / unaligned, channel-state bytes, duplicates, missing, open
   transactions, and where the checkpoint and its HTML report are kept (the work directory
   stays after the demo; kafka-python's reconnect errors once the broker stopped are silenced).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unaligned._util.crash_points import kill_session
from unaligned.barriers.metrics import BarrierMetrics, read_metrics
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog

THROTTLE_BYTES_PER_S = 250_000
VALUE_BYTES = 1000
_POLL_S = 0.3


def skewed_values(records: int, partitions: int) -> dict[int, list[bytes]]:
    """The values to produce per partition: half of ``records`` in partition 0, the rest spread
    evenly over the others (all in partition 0 when there is only one)."""
    hot = records // 2 if partitions > 1 else records
    counts = [hot] + [
        (records - hot) // (partitions - 1) + (1 if p < (records - hot) % (partitions - 1) else 0)
        for p in range(partitions - 1)
    ]
    return {
        p: [
            json.dumps({"partition": p, "seq": i, "reading": round(i * 0.5, 1)})
            .encode()
            .ljust(VALUE_BYTES, b" ")
            for i in range(count)
        ]
        for p, count in enumerate(counts)
    }


@dataclass
class Watcher:
    """Prints every barrier of the checkpoint once, as the sink commits it."""

    checkpoint: Checkpoint
    shown: dict[int, BarrierMetrics] = field(default_factory=dict)

    def poll(self) -> None:
        for m in read_metrics(self.checkpoint):
            if m.batch_id in self.shown:
                continue
            self.shown[m.batch_id] = m
            print(
                f"  barrier {m.batch_id:>2}: {m.mode:<9} {m.duration_ms:>6} ms  "
                f"{m.rows_written:>5} rows written  {m.rows_spilled:>4} spilled  "
                f"{m.rows_replayed:>4} replayed  {m.bytes_spilled:>8} bytes of channel state",
                flush=True,
            )

    def pending_rows(self) -> int:
        """Rows of channel state the latest decided barrier left pending."""
        log = CommitLog(self.checkpoint)
        decided = log.decided_batch_ids()
        record = log.read(decided[-1]) if decided else None
        if record is None:
            return 0
        return sum(ref.remaining_rows for refs in record.channel_state.values() for ref in refs)


def _start(config: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "unaligned.demo.query_run", json.dumps(config)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _run_until(
    proc: subprocess.Popen[bytes], watcher: Watcher, kill_when_pending: bool, timeout_s: float
) -> bool:
    """Watch the query process; with ``kill_when_pending``, kill it hard once a barrier was cut
    and channel state is pending. Returns whether it was killed."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        watcher.poll()
        cut = any(m.mode == "unaligned" for m in watcher.shown.values())
        if kill_when_pending and cut and (pending := watcher.pending_rows()):
            kill_session(proc.pid)
            proc.wait()
            print(
                f"\n  ** killed the query hard (SIGKILL: driver, JVM, Python workers) with "
                f"{pending} rows of channel state pending **\n",
                flush=True,
            )
            return True
        if time.monotonic() > deadline:
            kill_session(proc.pid)
            raise TimeoutError(f"the demo's query did not end within {timeout_s:.0f} s")
        time.sleep(_POLL_S)
    watcher.poll()
    if proc.returncode != 0:
        raise RuntimeError(f"the demo's query failed (exit {proc.returncode}); see its log")
    return False


def run_demo(records: int, partitions: int, workdir: Path) -> int:
    """Run the story; return 0 when every record arrived exactly once and nothing is open."""
    from unaligned.kafka.transactions.transaction_states import list_transactional_ids
    from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix
    from unaligned.testing import EmbeddedKafka

    started = time.monotonic()
    print(f"starting the embedded Kafka broker (files under {workdir})", flush=True)
    with EmbeddedKafka(data_dir=workdir / "kafka") as broker:
        source, output = "demo-input", "demo-output"
        broker.create_topic(source, partitions=partitions)
        broker.create_topic(output, partitions=partitions)
        expected = skewed_values(records, partitions)
        broker.produce(
            source,
            (
                (p, f"sensor-{i % 17}".encode(), v, [("origin", b"demo")], None)
                for p, values in expected.items()
                for i, v in enumerate(values)
            ),
        )
        print(
            f"produced {records} records of {VALUE_BYTES} B to {source!r}: "
            f"{len(expected[0])} in hot partition 0, the rest over {partitions - 1} others",
            flush=True,
        )
        broker.throttle_producers(THROTTLE_BYTES_PER_S)
        print(f"throttled the broker to {THROTTLE_BYTES_PER_S // 1000} kB/s per producer")
        checkpoint = str(workdir / "checkpoint")
        config = {
            "bootstrap": broker.bootstrap_servers,
            "input_topic": source,
            "output_topic": output,
            "checkpoint": checkpoint,
            "max_offsets": max(1, records // 5),
        }
        log = workdir / "query.log"
        watcher = Watcher(Checkpoint.resolve(checkpoint))
        print("\nrun 1: starting the query (Spark takes a few seconds to start)", flush=True)
        killed = _run_until(_start(config, log), watcher, True, timeout_s=300)
        if not killed:
            print("(the query ended before any barrier was cut: nothing to kill)")
        print("run 2: restarting from the same checkpoint", flush=True)
        _run_until(_start(config, log), watcher, False, timeout_s=300)
        broker.throttle_producers(None)
        print("the input ended: EndOfData, final checkpoint committed, query stopped\n")

        got: dict[int, list[bytes]] = defaultdict(list)
        for record in broker.consume_all(output, read_committed=True):
            got[record.partition].append(record.value)
        prefix = default_transactional_id_prefix(watcher.checkpoint.query_id())
        open_ids = list_transactional_ids({"bootstrap_servers": broker.bootstrap_servers}, prefix)
        # The process keeps the admin client that listed them (kafka/clients/admin_clients.py); once
        # the broker stops, its I/O thread would log every failed reconnect over the summary.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    return _summary(expected, dict(got), watcher, len(open_ids), checkpoint, workdir, started)


def _report(checkpoint: str, workdir: Path) -> Path:
    """Write the checkpoint's HTML report (``unaligned report``) next to it."""
    from unaligned.demo.query_run import ALIGNED_CHECKPOINT_TIMEOUT
    from unaligned.inspection import build_view
    from unaligned.inspection.html_report import render_html
    from unaligned.options.parsing import parse_duration_ms

    timeout_ms = parse_duration_ms("alignedCheckpointTimeout", ALIGNED_CHECKPOINT_TIMEOUT)
    path = workdir / "report.html"
    path.write_text(
        render_html(build_view(Checkpoint.resolve(checkpoint)), timeout_ms), encoding="utf-8"
    )
    return path


def _summary(
    expected: dict[int, list[bytes]],
    got: dict[int, list[bytes]],
    watcher: Watcher,
    open_transactions: int,
    checkpoint: str,
    workdir: Path,
    started: float,
) -> int:
    want = {v for values in expected.values() for v in values}
    seen = [v for values in got.values() for v in values]
    duplicates = len(seen) - len(set(seen))
    missing = len(want - set(seen))
    in_order = all(got.get(p, []) == values for p, values in expected.items())
    barriers = list(watcher.shown.values())
    cut = sum(1 for m in barriers if m.mode == "unaligned")
    print(f"records produced         {len(want)}")
    print(f"records read back        {len(seen)} (read_committed, independent consumer)")
    print(
        f"barriers                 {len(barriers)}: {len(barriers) - cut} aligned, {cut} unaligned"
    )
    print(f"channel state spilled    {sum(m.bytes_spilled for m in barriers)} bytes")
    print(f"rows replayed            {sum(m.rows_replayed for m in barriers)}")
    print(f"duplicates               {duplicates}")
    print(f"missing                  {missing}")
    print(f"per-partition order kept {'yes' if in_order else 'NO'}")
    print(f"open transactions        {open_transactions}")
    print(f"checkpoint               {checkpoint}")
    print(f"HTML report              {_report(checkpoint, workdir)}")
    print(f"took                     {time.monotonic() - started:.0f} s")
    print(f"\nthe files are kept in {workdir} (remove them with: rm -r {workdir})")
    ok = duplicates == 0 and missing == 0 and in_order and open_transactions == 0
    print("\nexactly once: " + ("yes" if ok else "NO"))
    return 0 if ok else 1
