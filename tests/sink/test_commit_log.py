"""Commit records: atomic, write-once, readable by any later process, pruned only when done."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from unaligned._util.checksum import sealed_json
from unaligned._util.fs import atomic_write, resolve_location
from unaligned.channel_state.refs import FileChannelState, InlineChannelState
from unaligned.checkpoint import Checkpoint
from unaligned.errors import CommitLogError
from unaligned.sink.commit_log import CommitLog, CommitRecord


def _record(batch_id: int, n: int = 2) -> CommitRecord:
    return CommitRecord(
        batch_id=batch_id,
        participant="kafka",
        prepared=tuple(
            {"transactionalId": f"p-{batch_id}-{i}-0", "partition": i} for i in range(n)
        ),
        decided_at_ms=1_700_000_000_000 + batch_id,
    )


def test_record_round_trip_and_layout(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    assert log.read(0) is None
    log.write(_record(0))
    assert (tmp_path / "unaligned" / "commits" / "0.json").is_file()
    assert not (tmp_path / "unaligned-sink").exists()
    # A fresh object (another process) reads the same decision.
    assert CommitLog(Checkpoint.resolve(str(tmp_path))).read(0) == _record(0)
    assert log.decided_batch_ids() == [0]
    assert log.unfinished_batch_ids() == [0]


def test_a_decision_is_never_replaced(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    assert log.write(_record(3, n=1))
    assert not log.write(_record(3, n=2))
    assert log.read(3) == _record(3, n=1)


def test_of_two_deciders_racing_exactly_one_decides(tmp_path: Path) -> None:
    """Scenario 12 (issue 8): an earlier run's commit process and a restarted run decide the
    same batch at once. Threads released together race on the same record; one writes it."""
    import threading

    logs = [CommitLog(Checkpoint.resolve(str(tmp_path))) for _ in range(8)]
    start = threading.Barrier(len(logs))
    won: list[int] = []

    def decide(n: int) -> None:
        start.wait()
        if logs[n].write(_record(5, n=n + 1)):
            won.append(n)

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(len(logs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert logs[0].read(5) == _record(5, n=won[0] + 1)
    assert [p.name for p in (tmp_path / "unaligned" / "commits").iterdir()] == ["5.json"]


def test_file_uri_checkpoint(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(f"file://{tmp_path}"))
    log.write(_record(1))
    assert CommitLog(Checkpoint.resolve(str(tmp_path))).read(1) == _record(1)


def test_done_markers_and_unfinished(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    for b in range(3):
        log.write(_record(b))
    log.mark_done(0, commit_ms=12.5)
    log.mark_done(2)
    assert log.unfinished_batch_ids() == [1]
    assert log.is_done(0) and not log.is_done(1)
    info = log.done_info(0)
    assert info is not None and info["commitMs"] == 12.5
    assert log.done_info(1) is None


def test_temporary_files_are_invisible(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    commits = tmp_path / "unaligned" / "commits"
    commits.mkdir(parents=True)
    (commits / ".5.json.abc.tmp").write_text("{half")
    assert log.decided_batch_ids() == []
    assert log.read(5) is None


def test_corrupt_record_is_a_loud_error(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    commits = tmp_path / "unaligned" / "commits"
    commits.mkdir(parents=True)
    (commits / "4.json").write_text("{not json")
    with pytest.raises(CommitLogError, match="4.json"):
        log.read(4)
    (commits / "6.json").write_text(json.dumps(json.loads(_record(7).to_json())))
    with pytest.raises(CommitLogError, match="names batch 7"):
        log.read(6)


def test_unknown_version_refused(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    doc = json.loads(_record(1).to_json())
    doc["version"] = 99
    commits = tmp_path / "unaligned" / "commits"
    commits.mkdir(parents=True)
    (commits / "1.json").write_bytes(sealed_json(doc))  # a later version's sealed record
    with pytest.raises(CommitLogError, match="version 99"):
        log.read(1)


def test_prune_keeps_newest_done_and_every_unfinished(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    for b in range(6):
        log.write(_record(b))
    for b in (0, 1, 2, 4, 5):
        log.mark_done(b)
    assert log.prune(retain=2) == [0, 1, 2]
    assert log.decided_batch_ids() == [3, 4, 5]
    assert log.unfinished_batch_ids() == [3]
    with pytest.raises(CommitLogError):
        log.prune(retain=0)


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    location = resolve_location(str(tmp_path)).child("sub", "f.json")
    atomic_write(location, b"first")
    atomic_write(location, b"second")
    assert (tmp_path / "sub" / "f.json").read_bytes() == b"second"
    assert sorted(os.listdir(tmp_path / "sub")) == ["f.json"]


# A commit record with channel state, byte for byte as earlier versions wrote it (refs as JSON).
RECORD_WITH_CHANNEL_STATE = (
    b'{"batchId": 3, "channelState": {"0": [{"barrier_id": 3, "byte_size": 4, "crc32": 7, '
    b'"inline_avro": "T2JqAQ==", "kind": "inline", "query_id": "q1", "row_count": 2, '
    b'"start_row": 0, "task_index": 0, "write_id": "w0"}], "1": [{"barrier_id": 2, '
    b'"byte_size": 500, "crc32": 123456, "kind": "file", '
    b'"path": "/ck/unaligned/channel-state/barrier-2/task-1.avro", "query_id": "q1", '
    b'"row_count": 10, "start_row": 4, "task_index": 1, '
    b'"uri": "file:///ck/unaligned/channel-state/barrier-2/task-1.avro", "write_id": "w1"}]}, '
    b'"decidedAtMs": 1700000000003, "participant": "kafka", '
    b'"prepared": [{"partition": 0, "transactionalId": "p-3-0-0"}], "version": 1}'
)


def test_channel_state_refs_are_objects_and_their_json_is_unchanged() -> None:
    record = CommitRecord.from_json(RECORD_WITH_CHANNEL_STATE, "3.json")
    (inline,) = record.channel_state[0]
    (file,) = record.channel_state[1]
    assert isinstance(inline, InlineChannelState) and inline.inline_avro == b"Obj\x01"
    assert isinstance(file, FileChannelState) and file.start_row == 4 and file.remaining_rows == 6
    assert file.uri == "file:///ck/unaligned/channel-state/barrier-2/task-1.avro"
    # Written again, the same bytes with the checksum added in its sorted place.
    assert record.to_json() == RECORD_WITH_CHANNEL_STATE.replace(
        b', "decidedAtMs"',
        b', "checksum": "sha256:9a0e2ec1b832c5f4e870813120f2ffe6b341fd129f339013ba9b17f8c79850e9"'
        b', "decidedAtMs"',
    )
    assert CommitRecord.from_json(record.to_json(), "3.json") == record


def test_a_record_changed_after_it_was_written_stops_naming_the_file(tmp_path: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    assert log.write(_record(2))
    path = tmp_path / "unaligned" / "commits" / "2.json"
    doc = json.loads(path.read_bytes())
    doc["prepared"][0]["partition"] = 1  # edited into other valid JSON
    path.write_text(json.dumps(doc, sort_keys=True))
    with pytest.raises(CommitLogError) as raised:
        log.read(2)
    message = str(raised.value)
    assert message.startswith(f"commit record {path}: its content does not match its checksum")
    assert "was changed after it was written" in message
    doc.pop("checksum")  # a deliberate edit, its checksum removed: read as it is
    path.write_text(json.dumps(doc))
    record = log.read(2)
    assert record is not None and record.prepared[0]["partition"] == 1


def test_a_malformed_channel_state_ref_makes_the_record_unreadable() -> None:
    doc = json.loads(RECORD_WITH_CHANNEL_STATE)
    doc["channelState"]["1"][0]["kind"] = "tape"
    with pytest.raises(CommitLogError, match=r"3\.json is unreadable: .*barrier 2"):
        CommitRecord.from_json(json.dumps(doc).encode(), "3.json")


def test_a_record_keeps_its_task_count_and_one_without_reads_as_unknown() -> None:
    import dataclasses

    record = dataclasses.replace(_record(4), task_count=3)
    assert json.loads(record.to_json())["taskCount"] == 3
    assert CommitRecord.from_json(record.to_json(), "4.json").task_count == 3
    assert "taskCount" not in json.loads(_record(4).to_json())
    assert CommitRecord.from_json(_record(4).to_json(), "4.json").task_count is None
