"""A checkpoint with one of everything ``unaligned inspect`` shows (``checkpoint`` fixture).

Batches, as a query leaves them after a crash right after the sink decided batch 3:

====== ======================= ============================ ==================================
batch  Spark                   sink                         metrics
====== ======================= ============================ ==================================
0      pruned (no log entry)   pruned (older than done 1)   aligned, 1200 ms
1      committed               done                         unaligned, 31 s, 30 spilled, 4 KiB
2      committed               done                         aligned, 2 s, 30 replayed, 100 B
3      planned                 in-doubt (2 transactions)    none
4      planned                 undecided                    none
====== ======================= ============================ ==================================
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint_files import (
    decide,
    file_ref,
    inline_ref,
    kafka_item,
    metrics,
    new_checkpoint,
    plan,
    source_offset,
    spark_commit,
    store_metrics,
)

ENDING = {0: 40, 1: 15}


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    root = new_checkpoint(tmp_path / "ck")
    for batch, positions in enumerate([{0: 10, 1: 5}, {0: 20, 1: 10}, {0: 30, 1: 12}]):
        plan(root, batch + 1, [source_offset(positions, ending=ENDING), "-"])
    plan(root, 4, [source_offset({0: 40, 1: 12}, ending=ENDING), 7])
    spark_commit(root, 1)
    spark_commit(root, 2)
    store_metrics(root, metrics(0))
    store_metrics(
        root,
        metrics(
            1,
            mode="unaligned",
            duration_ms=31_000,
            start_delay_ms=120,
            tasks_cut=1,
            rows_written=70,
            rows_spilled=30,
            bytes_spilled=4096,
            channel_state_files=1,
            channel_state_bytes=4096,
        ),
    )
    store_metrics(
        root,
        metrics(2, duration_ms=2000, rows_replayed=30, rows_spilled=3, inlined_bytes=100),
    )
    decide(root, 1, prepared=[kafka_item("unaligned-q-0-0"), kafka_item("unaligned-q-1-0")])
    decide(
        root,
        2,
        prepared=[kafka_item("unaligned-q-0-0")],
        channel_state={1: [inline_ref(2, 1, 3, 100)]},
    )
    decide(
        root,
        3,
        prepared=[kafka_item("unaligned-q-0-1"), kafka_item("unaligned-q-1-1")],
        channel_state={
            0: [file_ref(1, 0, 30, 4096, start_row=5)],
            1: [inline_ref(2, 1, 3, 100), inline_ref(3, 1, 2, 60)],
        },
        done=False,
    )
    return root
