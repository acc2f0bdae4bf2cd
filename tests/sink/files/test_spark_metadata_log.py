"""The ``_spark_metadata`` log in Spark's layout: names, compaction, the interval an existing log
fixes, appends that land once (a roll-forward, a lost race, two deciders), retention and
clean-up. Spark itself reads these logs in integration/test_file_sink_readers.py."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from unaligned._util.fs import resolve_location
from unaligned.errors import CommitLogError
from unaligned.sink.files import spark_metadata_log
from unaligned.sink.files.spark_log_layout import (
    BLOCK_SIZE,
    SPARK_METADATA_DIR,
    LogFile,
    LogPosition,
    compact_interval,
    spark_uri,
)
from unaligned.sink.files.spark_metadata_log import CLEANUP_DELAY_MS, LogSettings, SparkMetadataLog

Q = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
R = "99999999-dddd-eeee-ffff-012345678901"


def _log(tmp_path: Path, **settings: int | None) -> SparkMetadataLog:
    out = tmp_path / "out"
    return SparkMetadataLog(
        resolve_location(str(out)), spark_uri(str(out)), LogSettings(**settings)
    )  # type: ignore[arg-type]


def _files(query: str, batch: int, count: int = 2) -> list[tuple[str, int]]:
    return [(f"part-{query}-{batch:010d}-{i:05d}.parquet", 100 + i) for i in range(count)]


def _append(log: SparkMetadataLog, query: str, batch: int, ms: int, search_from: int) -> int:
    """Append ``batch`` after log id ``search_from - 1``, the interval not known (the listing
    path); its log id."""
    return log.append_batch(
        query, batch, _files(query, batch), ms, LogPosition(search_from - 1)
    ).log_id


def _chain(log: SparkMetadataLog, batches: int) -> LogPosition:
    """Query ``Q``'s batches ``0 .. batches - 1``, each appended after the position the one
    before returned (as the file sink does); the last position."""
    position = LogPosition(-1)
    for b in range(batches):
        position = log.append_batch(Q, b, _files(Q, b), 1, position)
    return position


def count_listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the directory listings made from here on."""
    made: list[int] = []
    listing = SparkMetadataLog.files

    def counted(self: SparkMetadataLog) -> list[LogFile]:
        made.append(1)
        return listing(self)

    monkeypatch.setattr(SparkMetadataLog, "files", counted)
    return made


def _names(tmp_path: Path) -> list[str]:
    return sorted(
        (p.name for p in (tmp_path / "out" / SPARK_METADATA_DIR).iterdir()),
        key=lambda n: int(n.split(".")[0]),
    )


def _paths(log: SparkMetadataLog) -> list[str]:
    return [str(line["path"]) for line in log.all_lines()]


def test_each_batch_is_one_log_file_and_every_tenth_a_compaction(tmp_path: Path) -> None:
    log = _log(tmp_path)
    ids = [_append(log, Q, b, 1000 + b, b) for b in range(25)]
    assert ids == list(range(25))
    names = _names(tmp_path)
    assert names == [
        *map(str, range(9)),
        "9.compact",
        *map(str, range(10, 19)),
        "19.compact",
        *map(str, range(20, 25)),
    ]
    meta = tmp_path / "out" / SPARK_METADATA_DIR
    head, *lines = (meta / "3").read_text().split("\n")
    assert head == "v1"
    assert [json.loads(line) for line in lines] == [
        {
            "path": f"file:{tmp_path}/out/part-{Q}-0000000003-0000{i}.parquet",
            "size": 100 + i,
            "isDir": False,
            "modificationTime": 1003,
            "blockReplication": 1,
            "blockSize": BLOCK_SIZE,
            "action": "add",
        }
        for i in range(2)
    ]
    compacted = (meta / "19.compact").read_text().split("\n")[1:]
    assert len(compacted) == 2 * 20  # every entry of ids 0-19
    assert _paths(log) == [
        f"file:{tmp_path}/out/{name}" for b in range(25) for name, _ in _files(Q, b)
    ]


def test_an_append_already_made_is_found_not_repeated(tmp_path: Path) -> None:
    """A roll-forward after a crash between the append and the manifest entry, also once a
    compaction has folded the first append (searched from the previous batch's position)."""
    log = _log(tmp_path, compact_interval=3)
    assert _append(log, Q, 0, 1, 0) == 0
    assert _append(log, Q, 1, 1, 1) == 1
    before = _names(tmp_path)
    assert _append(log, Q, 1, 1, 1) == 1
    assert _names(tmp_path) == before
    for b in range(2, 5):  # 2.compact folds 0 and 1
        _append(log, Q, b, 1, b)
    assert _append(log, Q, 1, 1, 1) == 2
    assert _append(log, Q, 3, 1, 3) == 3
    paths = _paths(log)
    assert len(paths) == len(set(paths)) == 10


def _first_create_races(monkeypatch: pytest.MonkeyPatch, other: Callable[[], int]) -> list[int]:
    """Run ``other`` (another writer's append) once, between this writer's listing and its
    create; the list gets the id ``other`` appended at."""
    real_create = spark_metadata_log.create_exclusive
    raced: list[int] = []

    def create_after_the_other(location, data):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(-1)
            raced[0] = other()
        return real_create(location, data)

    monkeypatch.setattr(spark_metadata_log, "create_exclusive", create_after_the_other)
    return raced


def test_a_lost_race_for_an_id_appends_at_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another query takes the id between this one's listing and its create: nothing is
    overwritten, no id is skipped."""
    log, other = _log(tmp_path), _log(tmp_path)
    _append(log, Q, 0, 1, 0)
    raced = _first_create_races(monkeypatch, lambda: _append(other, R, 0, 1, 0))
    assert _append(log, Q, 1, 1, 1) == 2
    assert raced == [1]
    assert _names(tmp_path) == ["0", "1", "2"]
    assert [p.rsplit("/", 1)[1] for p in _paths(log)] == [
        name for q, b in ((Q, 0), (R, 0), (Q, 1)) for name, _ in _files(q, b)
    ]


def test_two_deciders_of_one_batch_append_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier run's commit process rolls the same batch forward at the same moment: the
    one that loses the id finds the batch in what the winner wrote."""
    log, twin = _log(tmp_path), _log(tmp_path)
    raced = _first_create_races(monkeypatch, lambda: _append(twin, Q, 7, 1, 0))
    assert _append(log, Q, 7, 1, 0) == 0
    assert raced == [0]
    assert _names(tmp_path) == ["0"]
    assert len(_paths(log)) == 2


def test_an_existing_logs_compactions_decide_the_interval(tmp_path: Path) -> None:
    """A log Spark's sink (or a query with another interval) started, with compactions at 4
    and 9: the interval is 5 whatever this query's default."""
    meta = tmp_path / "out" / SPARK_METADATA_DIR
    meta.mkdir(parents=True)
    for log_id in range(12):
        name = f"{log_id}.compact" if log_id in (4, 9) else str(log_id)
        (meta / name).write_text("v1")
    log = _log(tmp_path, compact_interval=10)
    assert compact_interval(log.files(), 10) == 5
    assert [_append(log, Q, b, 1, 12) for b in range(3)] == [12, 13, 14]
    assert "14.compact" in _names(tmp_path)


def test_a_missing_or_misnamed_log_file_is_loud(tmp_path: Path) -> None:
    log = _log(tmp_path, compact_interval=4)
    for b in range(3):
        _append(log, Q, b, 1, b)
    meta = tmp_path / "out" / SPARK_METADATA_DIR
    (meta / ".1.0123abcd.tmp").write_text("x")  # what a killed writer leaves: not a log file
    (meta / "1").unlink()
    with pytest.raises(CommitLogError, match="log file 1 is missing"):
        log.all_lines()
    (meta / "1").write_text("v1")
    (meta / "3").write_text("v1")  # id 3 is a compaction: Spark looks for 3.compact
    with pytest.raises(CommitLogError, match="log file 3.compact is missing"):
        log.all_lines()


def test_retention_drops_this_querys_old_entries_at_a_compaction(tmp_path: Path) -> None:
    """SPARK-27188: entries older than the retention leave the log when it compacts. With
    several queries on one path, each drops only its own."""
    log = _log(tmp_path, compact_interval=5, retention_ms=60_000)
    now = int(time.time() * 1000)
    _append(log, Q, 0, now - 3_600_000, 0)  # an hour old
    _append(log, R, 0, now - 3_600_000, 0)  # another query's, as old
    for b in range(1, 4):
        _append(log, Q, b, now, b + 1)
    kept = [p.rsplit("/", 1)[1] for p in _paths(log)]
    assert "4.compact" in _names(tmp_path)
    assert kept == [n for q, b in ((R, 0), (Q, 1), (Q, 2), (Q, 3)) for n, _ in _files(q, b)]


def test_old_log_files_are_deleted_past_min_batches_and_the_cleanup_delay(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, compact_interval=3, min_batches_to_retain=4)
    meta = tmp_path / "out" / SPARK_METADATA_DIR
    for b in range(9):
        _append(log, Q, b, 1, b)
        if b == 5:  # files 0-5 were written long ago, 6-8 just now
            old = time.time() - 2 * CLEANUP_DELAY_MS / 1000
            for path in meta.iterdir():
                os.utime(path, (old, old))
    # At id 8 (a compaction), ids below compaction 2 (the one before 8 + 1 - 4 = 5) may go.
    assert _names(tmp_path) == ["2.compact", "3", "4", "5.compact", "6", "7", "8.compact"]
    assert len(_paths(log)) == 18


def test_a_log_of_another_format_is_refused(tmp_path: Path) -> None:
    meta = tmp_path / "out" / SPARK_METADATA_DIR
    meta.mkdir(parents=True)
    (meta / "0").write_text("v2\n{}")
    with pytest.raises(CommitLogError, match="not a file sink log"):
        _log(tmp_path).all_lines()


def test_appends_after_a_known_position_list_the_directory_only_to_compact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(tmp_path)
    position = LogPosition(-1)
    listings = count_listings(monkeypatch)
    listed_at = []
    for b in range(45):
        before = len(listings)
        position = log.append_batch(Q, b, _files(Q, b), 1, position)
        assert position.log_id == b
        if len(listings) > before:
            listed_at.append(b)
    # Until two compactions fix the interval every append lists; then only compactions do.
    assert listed_at == [*range(20), 29, 39]
    assert position.interval == 10
    assert _names(tmp_path)[-6:] == ["39.compact", "40", "41", "42", "43", "44"]
    assert len(_paths(log)) == 90


def test_the_look_up_finds_other_writers_appends_and_an_append_already_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(tmp_path)
    position = _chain(log, 21)
    assert position == LogPosition(20, 10)
    _append(log, R, 0, 1, 0)  # another query takes 21
    listings = count_listings(monkeypatch)
    assert log.append_batch(Q, 21, _files(Q, 21), 1, position) == LogPosition(22, 10)
    # A roll-forward of the same batch from the same position finds it, not appends it.
    assert log.append_batch(Q, 21, _files(Q, 21), 1, position) == LogPosition(22, 10)
    assert listings == []
    assert len(_paths(log)) == 2 * 23


def test_the_look_up_lists_instead_when_it_cannot_tell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(tmp_path)
    assert _chain(log, 22) == LogPosition(21, 10)
    listings = count_listings(monkeypatch)
    # An interval that does not name the previous file: listed, and the true one returned.
    assert log.append_batch(Q, 22, _files(Q, 22), 1, LogPosition(21, 11)) == LogPosition(22, 10)
    assert len(listings) == 1
    # The previous file is older than half the cleanup delay: ids after it may be gone.
    old = time.time() - CLEANUP_DELAY_MS / 1000
    os.utime(tmp_path / "out" / SPARK_METADATA_DIR / "22", (old, old))
    assert log.append_batch(Q, 23, _files(Q, 23), 1, LogPosition(22, 10)) == LogPosition(23, 10)
    assert len(listings) == 2
    assert _names(tmp_path)[-3:] == ["21", "22", "23"]


def test_a_lost_race_on_the_look_up_path_appends_at_the_next_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, other = _log(tmp_path), _log(tmp_path)
    position = _chain(log, 21)
    raced = _first_create_races(monkeypatch, lambda: _append(other, R, 0, 1, 0))
    assert log.append_batch(Q, 21, _files(Q, 21), 1, position) == LogPosition(22, 10)
    assert raced == [21]
    assert _names(tmp_path)[-2:] == ["21", "22"]
