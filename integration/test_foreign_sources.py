"""Sources other than format("unaligned") emit no idle barriers (issue 8, scenario 4).

Rows an unaligned barrier leaves pending are written by a later barrier. A file source (or
Spark's own Kafka source) under ``availableNow`` ends after its last batch, so with such a
source the sink must never cut: before the fix a file source with ``availableNow`` ended
"successfully" with most rows left in channel state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from unaligned.sink.files.committed_files import read_committed_files

ROWS = 2_000


def test_a_file_source_under_available_now_writes_every_row(spark: Any, tmp_path: Path) -> None:
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    for part in range(4):
        ids = list(range(part * ROWS // 4, (part + 1) * ROWS // 4))
        pq.write_table(pa.table({"id": ids}), source_dir / f"part-{part}.parquet")
    output = tmp_path / "out"
    query = (
        spark.readStream.schema("id long")
        .parquet(str(source_dir))
        .writeStream.format("unaligned")
        .option("path", str(output))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .option("checkpointMode", "unaligned")
        .option("alignedCheckpointTimeout", "0s")  # every barrier's deadline has passed
        .option("chunkRows", "10")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    ids = sorted(read_committed_files(str(output)).column("id").to_pylist())
    assert ids == list(range(ROWS))
    state = tmp_path / "checkpoint" / "unaligned" / "channel-state"
    assert not state.exists() or not [p for p in state.rglob("*.avro")]
