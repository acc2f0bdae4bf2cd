"""What a table commit carries: Delta's add-action statistics and partition values, data
file names, and the Kafka offsets of the batch."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from checkpoint_files import new_checkpoint, plan, source_offset
from unaligned.checkpoint import Checkpoint
from unaligned.sink.tables.batch_summary import batch_summary
from unaligned.sink.tables.data_file_writer import data_file_name, parse_data_file_name
from unaligned.sink.tables.delta_layout import delta_stats, log_path, partition_string


def test_delta_stats_come_from_the_footer_and_leave_out_what_delta_cannot_compare(
    tmp_path: Path,
) -> None:
    rows = pa.table(
        {
            "n": pa.array([3, None, 1], pa.int64()),
            "s": ["b", "a", None],
            "long": ["x" * 40, "y", "z"],
            "b": pa.array([b"\x00", b"\x01", None]),
            "f": pa.array([1.5, float("nan"), 0.5]),
            "ts": pa.array(
                [dt.datetime(2024, 1, d, tzinfo=dt.timezone.utc) for d in (2, 1, 3)],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    path = tmp_path / "f.parquet"
    with pq.ParquetWriter(path, rows.schema) as writer:
        writer.write_table(rows.slice(0, 2))
        writer.write_table(rows.slice(2))
    stats = json.loads(delta_stats(pq.read_metadata(path)))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {
        "n": 1,
        "s": "a",
        "ts": "2024-01-01T00:00:00.000000Z",
    } | ({"f": stats["minValues"]["f"]} if "f" in stats["minValues"] else {})
    assert stats["maxValues"]["n"] == 3 and stats["maxValues"]["ts"].startswith("2024-01-03")
    assert "long" not in stats["minValues"] and "b" not in stats["maxValues"]
    assert stats["nullCount"] == {"n": 1, "s": 1, "long": 0, "b": 1, "f": 0, "ts": 0}


def test_partition_values_and_paths_as_delta_writes_them() -> None:
    assert partition_string(None) is None
    assert partition_string(True) == "true"
    assert partition_string(dt.date(2024, 1, 2)) == "2024-01-02"
    assert partition_string(dt.datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02 03:04:05.000000"
    assert log_path("p=a%20b/part-1.parquet") == "p=a%2520b/part-1.parquet"


def test_data_file_names_say_whose_they_are() -> None:
    query = "5e0c1d2a-1111-2222-3333-444455556666"
    name = data_file_name(12, 3, 1, "0a1b2c3d", 0, query)
    parsed = parse_data_file_name(name)
    assert parsed is not None
    assert (parsed.batch_id, parsed.partition_id, parsed.attempt, parsed.query_id) == (
        12,
        3,
        1,
        query,
    )
    assert parse_data_file_name("part-00000-uuid-c000.snappy.parquet") is None


def test_the_summary_carries_the_kafka_offsets_the_batch_read(tmp_path: Path) -> None:
    root = new_checkpoint(tmp_path / "cp")
    plan(root, 0, [source_offset({0: 10, 1: 5})])
    plan(root, 1, [source_offset({0: 25, 1: 5}), None])
    checkpoint = Checkpoint.resolve(str(root))
    first = batch_summary(checkpoint, "q", 0)
    assert json.loads(first["unaligned.kafkaOffsets"]) == {"in": {"0": [None, 10], "1": [None, 5]}}
    second = batch_summary(checkpoint, "q", 1)
    assert second["unaligned.batchId"] == "1" and second["unaligned.queryId"] == "q"
    assert json.loads(second["unaligned.kafkaOffsets"]) == {"in": {"0": [10, 25], "1": [5, 5]}}
    assert "unaligned.kafkaOffsets" not in batch_summary(checkpoint, "q", 7)  # no offset log


def test_leftovers_of_the_newest_batches_go_at_once_older_ones_at_the_next_sweep(
    tmp_path: Path,
) -> None:
    from unaligned.sink.commit_log import CommitLog, CommitRecord
    from unaligned.sink.tables.leftover_files import SWEEP_EVERY, remove_leftovers
    from unaligned.sink.tables.table_storage import TableStorage

    query = "5e0c1d2a-1111-2222-3333-444455556666"
    root = new_checkpoint(tmp_path / "cp", query)
    log = CommitLog(Checkpoint.resolve(str(root)))
    data = tmp_path / "data"
    data.mkdir()
    storage = TableStorage(str(data))

    def file(batch: int, token: str) -> str:
        name = data_file_name(batch, 0, 0, token, 0, query)
        (data / name).write_bytes(b"x")
        return name

    for batch in range(SWEEP_EVERY - 1):
        named = file(batch, "aaaaaaaa")
        item = {"partition": 0, "files": [{"path": named, "bytes": 1}]}
        log.write(CommitRecord(batch, "delta", (item,), 0))
        log.mark_done(batch)
    old_zombie = file(2, "bbbbbbbb")
    new_zombie = file(SWEEP_EVERY - 2, "cccccccc")
    assert remove_leftovers(storage, query, log, SWEEP_EVERY - 2) == 1
    assert not (data / new_zombie).exists() and (data / old_zombie).exists()
    assert remove_leftovers(storage, query, log, SWEEP_EVERY) == 1  # the sweep
    assert not (data / old_zombie).exists()
    assert len(list(data.iterdir())) == SWEEP_EVERY - 1  # every named file kept
