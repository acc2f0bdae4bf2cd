"""Stop requests under the checkpoint, and the driver-local link through which the source
finds them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from unaligned._util.fs import Location
from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.stop_request import (
    StopRequest,
    link,
    linked_location,
    mark_honoured,
    read_request,
    request_stop,
    withdraw,
)


@pytest.fixture(autouse=True)
def hint_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "hints"
    monkeypatch.setenv(HINT_DIR_ENV, str(directory))
    return directory


def test_a_request_is_recorded_honoured_once_and_replaced_by_a_newer_one(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ck")
    assert read_request(Checkpoint.resolve(checkpoint)) is None
    first = request_stop(Checkpoint.resolve(checkpoint), drain=True)
    assert read_request(Checkpoint.resolve(checkpoint)) == first and first.honoured_by is None
    honoured = mark_honoured(Checkpoint.resolve(checkpoint), first, "reader1")
    read = read_request(Checkpoint.resolve(checkpoint))
    assert read == honoured and read.honoured_by == "reader1" and read.same_request(first)
    assert read.honoured_at_ms is not None and read.honoured_at_ms >= first.requested_at_ms
    second = request_stop(Checkpoint.resolve(checkpoint), drain=False)
    assert read_request(Checkpoint.resolve(checkpoint)) == second and not second.same_request(first)


def test_withdraw_removes_only_the_same_request(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ck")
    old = StopRequest(drain=True, requested_at_ms=1)
    newer = request_stop(Checkpoint.resolve(checkpoint), drain=False)
    withdraw(Checkpoint.resolve(checkpoint), old)
    assert (
        read_request(Checkpoint.resolve(checkpoint)) == newer
    )  # somebody asked again: theirs stays
    withdraw(Checkpoint.resolve(checkpoint), newer)
    assert read_request(Checkpoint.resolve(checkpoint)) is None
    withdraw(Checkpoint.resolve(checkpoint), newer)  # nothing there: no error


def test_a_half_written_request_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path.joinpath("ck", "unaligned", "stop.json")
    path.parent.mkdir(parents=True)
    path.write_text('{"drain": tr')
    with caplog.at_level(logging.WARNING):
        assert read_request(Checkpoint.resolve(str(tmp_path / "ck"))) is None
    assert f"ignoring the stop request {path}" in caplog.text


def test_a_request_changed_after_it_was_written_is_ignored_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = str(tmp_path / "ck")
    request_stop(Checkpoint.resolve(checkpoint), drain=False)
    path = tmp_path.joinpath("ck", "unaligned", "stop.json")
    document = json.loads(path.read_text())
    document["drain"] = True
    path.write_text(json.dumps(document))
    with caplog.at_level(logging.WARNING):
        assert read_request(Checkpoint.resolve(checkpoint)) is None
    assert f"ignoring the stop request {path}: its content does not match its checksum" in (
        caplog.text
    )
    document.pop("checksum")  # a deliberate edit, its checksum removed: read as it is
    path.write_text(json.dumps(document))
    request = read_request(Checkpoint.resolve(checkpoint))
    assert request is not None and request.drain


def _unresolved(location: str) -> Checkpoint:
    return Checkpoint(location, Location(pafs.LocalFileSystem(), "/ck", location))


def test_the_link_names_the_checkpoint_of_a_token_on_this_host(hint_dir: Path) -> None:
    assert linked_location("tok1") is None
    link("tok1", _unresolved("s3://bucket/ck"))
    link("tok1", _unresolved("s3://bucket/ck"))  # unchanged: not rewritten
    assert linked_location("tok1") == "s3://bucket/ck"
    link("tok1", Checkpoint.resolve("/other"))
    assert linked_location("tok1") == "/other"
    assert sorted(p.name for p in hint_dir.iterdir()) == ["tok1.checkpoint"]
    with pytest.raises(ValueError, match="alphanumeric"):
        link("../x", Checkpoint.resolve("/ck"))
