"""The checkpoint object: every path under ``<checkpoint>/``, resolved once."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from unaligned.checkpoint import Checkpoint
from unaligned.errors import BarrierError


def test_the_layout_under_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = Checkpoint.resolve(str(tmp_path))
    paths = {
        "metadata": checkpoint.metadata,
        "offsets/3": checkpoint.offsets(3),
        "commits/3": checkpoint.spark_commit(3),
        "unaligned/commits/3.json": checkpoint.commit_record(3),
        "unaligned/done/3.json": checkpoint.done_marker(3),
        "unaligned/metrics": checkpoint.metrics_dir,
        "unaligned/finished.json": checkpoint.finished_marker,
        "unaligned/stop.json": checkpoint.stop_request,
        "unaligned/source-heartbeat.json": checkpoint.source_heartbeat,
    }
    for relative, location in paths.items():
        assert location.path == f"{tmp_path}/{relative}"
    assert checkpoint.default_channel_state_path() == f"{tmp_path}/unaligned/channel-state"


def test_the_default_channel_state_path_keeps_a_uri_as_given() -> None:
    checkpoint = Checkpoint("s3a://bucket/ck/", Checkpoint.resolve("/ck").root)
    assert checkpoint.default_channel_state_path() == "s3a://bucket/ck/unaligned/channel-state"


def test_a_relative_location_is_made_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    checkpoint = Checkpoint.resolve("ck")
    assert checkpoint.location == "ck"
    assert checkpoint.root.path == f"{tmp_path}/ck"
    assert checkpoint.default_channel_state_path() == f"{tmp_path}/ck/unaligned/channel-state"


def test_it_pickles_as_its_location_or_with_a_handed_in_filesystem(tmp_path: Path) -> None:
    by_uri = Checkpoint.resolve(f"file://{tmp_path}")
    assert pickle.loads(pickle.dumps(by_uri)) == by_uri.__class__.resolve(f"file://{tmp_path}")
    handed = Checkpoint.resolve(str(tmp_path), pafs.LocalFileSystem())
    copy = pickle.loads(pickle.dumps(handed))
    assert (copy.location, copy.root.path, copy.root.uri) == (str(tmp_path), str(tmp_path), None)


def test_spark_logs_and_the_query_id(tmp_path: Path) -> None:
    checkpoint = Checkpoint.resolve(str(tmp_path / "ck"))
    assert not checkpoint.exists() and checkpoint.last_logged_batch() is None
    with pytest.raises(BarrierError, match="query metadata .* does not exist"):
        checkpoint.query_id()
    (tmp_path / "ck" / "offsets").mkdir(parents=True)
    (tmp_path / "ck" / "commits").mkdir()
    (tmp_path / "ck" / "metadata").write_text(json.dumps({"id": "q-1"}) + "\n")
    for batch in (0, 1, 2):
        (tmp_path / "ck" / "offsets" / str(batch)).write_text("v1\n{}")
    (tmp_path / "ck" / "commits" / "0").write_text("v1\n{}")
    assert checkpoint.exists() and checkpoint.has_metadata() and not checkpoint.has_state_dir()
    assert checkpoint.query_id() == "q-1"
    assert checkpoint.logged_batches() == [0, 1, 2] and checkpoint.last_logged_batch() == 2
    assert checkpoint.spark_committed_batches() == [0]
    assert checkpoint.spark_committed(0) and not checkpoint.spark_committed(1)
    (tmp_path / "ck" / "metadata").write_text("{}")
    with pytest.raises(BarrierError, match="has no JSON 'id'"):
        checkpoint.query_id()
