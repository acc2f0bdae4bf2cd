"""``unaligned inspect`` of a file sink's output path, and ``unaligned remove-orphans``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from file_sink_steps import QUERY, commit_log, make_participant, prepare_item, publish_batch
from unaligned import cli
from unaligned.sink.commit_log import CommitRecord
from unaligned.sink.files.file_manifest import final_name


def _output_with_an_orphan(tmp_path: Path) -> Path:
    participant = make_participant(tmp_path)
    log = commit_log(tmp_path, "ck")
    publish_batch(participant, log, 0)
    items = [prepare_item(participant, 1, p, 3) for p in range(2)]
    log.write(CommitRecord(1, "files", tuple(items), 0))
    participant.commit(items[:1], 1, lambda n: None)  # then the checkpoint was deleted
    return tmp_path / "out"


def test_inspect_shows_an_outputs_queries_and_orphans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _output_with_an_orphan(tmp_path)
    assert cli.main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Orphans (1)" in text and final_name(1, 0, QUERY) in text
    assert f"unaligned remove-orphans {out} --query <query id>" in text
    assert cli.main(["inspect", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["queries"][0]["queryId"] == QUERY
    assert doc["queries"][0]["committedBatches"] == 1
    assert [o["name"] for o in doc["queries"][0]["orphans"]] == [final_name(1, 0, QUERY)]


def test_remove_orphans_needs_the_queries_named_and_an_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _output_with_an_orphan(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["remove-orphans", str(out)])  # which queries: never a default
    assert cli.main(["remove-orphans", str(tmp_path / "ck"), "--all-queries"]) == 2
    assert cli.main(["remove-orphans", str(out), "--query", QUERY, "--dry-run"]) == 0
    assert "would remove 2" in capsys.readouterr().out
    assert (out / final_name(1, 0, QUERY)).is_file()
    assert cli.main(["remove-orphans", str(out), "--query", QUERY]) == 0
    assert not (out / final_name(1, 0, QUERY)).exists()
    assert (out / final_name(0, 0, QUERY)).is_file()
