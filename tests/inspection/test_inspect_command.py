"""``unaligned inspect``: the JSON document's shape and values, the text table, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoint_files import QUERY_ID, new_checkpoint, plan
from unaligned import cli

TOP_KEYS = {
    "abandoned",
    "checkpoint",
    "queryId",
    "barriers",
    "inDoubt",
    "openTransactions",
    "sources",
    "pendingChannelState",
    "finished",
    "stopRequest",
    "tableTarget",
}
BARRIER_KEYS = {
    "batchId",
    "startMs",
    "durationMs",
    "startDelayMs",
    "mode",
    "tasks",
    "tasksCut",
    "rowsWritten",
    "rowsSpilled",
    "rowsReplayed",
    "rowsCarried",
    "channelStateFiles",
    "channelStateBytes",
    "inlinedBytes",
    "sink",
    "spark",
    "committed",
}


def inspect_json(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    assert cli.main(["inspect", str(checkpoint), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_document_has_the_documented_keys_and_values(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = inspect_json(checkpoint, capsys)
    assert set(doc) == TOP_KEYS
    assert (doc["checkpoint"], doc["queryId"]) == (str(checkpoint), QUERY_ID)
    assert [set(b) for b in doc["barriers"]] == [BARRIER_KEYS] * 5
    one = doc["barriers"][1]
    assert one == {
        "batchId": 1,
        "startMs": 1_700_000_001_000,
        "durationMs": 31_000,
        "startDelayMs": 120,
        "mode": "unaligned",
        "tasks": 2,
        "tasksCut": 1,
        "rowsWritten": 70,
        "rowsSpilled": 30,
        "rowsReplayed": 0,
        "rowsCarried": 0,
        "channelStateFiles": 1,
        "channelStateBytes": 4096,
        "inlinedBytes": 0,
        "sink": "done",
        "spark": "committed",
        "committed": True,
    }
    assert doc["barriers"][4]["durationMs"] is None and doc["barriers"][4]["committed"] is False
    assert doc["inDoubt"] == [
        {
            "batchId": 3,
            "participant": "kafka",
            "decidedAtMs": 1_700_000_003_900,
            "preparedItems": 2,
            "transactionalIds": ["unaligned-q-0-1", "unaligned-q-1-1"],
            "twoPhaseCommit": False,
            "outcome": None,  # the broker was not asked
            "blocksReaders": False,
            "inTable": None,  # not a table batch
        }
    ]
    assert doc["tableTarget"] is None  # not a table sink
    assert doc["openTransactions"] is None
    assert doc["sources"] == [
        {
            "sourceId": "0",
            "batchId": 4,
            "barrierToken": "tok42",
            "positions": {"in": {"0": 40, "1": 12}},
            "ending": {"in": {"0": 40, "1": 15}},
            "finished": {"in": [0]},
            "endOfData": False,
            "drained": False,
            "readTasks": None,
            "layoutDrain": False,
        }
    ]
    assert doc["pendingChannelState"] == {
        "batchId": 3,
        "tasks": [
            {"taskIndex": 0, "rows": 25, "files": 1, "inline": 0, "bytes": 4096, "barriers": [1]},
            {"taskIndex": 1, "rows": 5, "files": 0, "inline": 2, "bytes": 160, "barriers": [2, 3]},
        ],
    }
    assert doc["finished"] is None and doc["stopRequest"] is None


def test_text_table_shows_every_section(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["inspect", str(checkpoint)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    barrier_rows = [line.split() for line in lines if line.startswith("      ")][:5]
    assert [row[0] for row in barrier_rows] == ["0", "1", "2", "3", "4"]
    row_one = next(line for line in lines if line.strip().startswith("1  2023-11-14"))
    for cell in ("31.0 s", "120 ms", "unaligned", "70", "30", "4.0 KiB", "done", "committed"):
        assert cell in row_one
    assert row_one.rstrip().endswith("yes")
    assert "In-doubt sink batches (1)" in out and "unaligned-q-0-1, unaligned-q-1-1" in out
    assert "not asked: pass --bootstrap-servers" in out
    assert "not stored in the checkpoint" in out
    assert "in[0:40, 1:12]" in out and "in[0:40, 1:15]" in out and "finished   in[0]" in out
    assert "Pending channel state after batch 3: 30 rows in 2 task(s)" in out
    assert "no (no unaligned/finished.json)" in out and "stop request  none" in out


def test_not_a_checkpoint_exits_2_naming_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["inspect", str(tmp_path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"unaligned inspect: {tmp_path} is not a streaming query's checkpoint" in captured.err
    assert "'metadata'" in captured.err


def test_foreign_checkpoint_exits_2_saying_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = new_checkpoint(tmp_path / "ck")
    plan(root, 0, [12])
    assert cli.main(["report", str(root), "-o", str(tmp_path / "r.html")]) == 2
    assert "carry no barrierToken" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_report_refuses_a_malformed_timeout(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(checkpoint), "-o", str(tmp_path / "r"), "--timeout", "x"]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_an_unreachable_cluster_exits_1_naming_it(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import kafka.errors as kafka_errors

    from unaligned.inspection import broker_transactions

    def refuse(client: Any, prefix: str) -> list[str]:
        assert client["bootstrap_servers"] == ["nowhere:9092"]
        raise kafka_errors.KafkaTimeoutError("Unable to bootstrap from nowhere:9092")

    monkeypatch.setattr(broker_transactions, "list_transactional_ids", refuse)
    assert cli.main(["inspect", str(checkpoint), "--bootstrap-servers", "nowhere:9092"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "prefix 'unaligned-q' at nowhere:9092" in captured.err
