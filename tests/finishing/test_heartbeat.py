"""The source's heartbeat: written under the linked checkpoint from a thread, read by stoppers."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from unaligned.barriers.idle import HINT_DIR_ENV
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.heartbeat import (
    SourceHeartbeat,
    beating,
    read_heartbeat,
    write_heartbeat,
)
from unaligned.finishing.stop_request import link


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(HINT_DIR_ENV, str(tmp_path / "hints"))
    root = tmp_path / "ck"
    root.mkdir()
    (root / "metadata").write_text('{"id":"q"}')
    return root


def _wait_for_heartbeat(checkpoint: Path) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if read_heartbeat(Checkpoint.resolve(str(checkpoint))) is not None:
            return True
        time.sleep(0.02)
    return False


def test_the_source_beats_once_its_token_is_linked_to_the_checkpoint(checkpoint: Path) -> None:
    heartbeat = SourceHeartbeat(interval_s=0.02)
    heartbeat.watch("tok1")
    time.sleep(0.1)
    assert (
        read_heartbeat(Checkpoint.resolve(str(checkpoint))) is None
    )  # no link yet: it cannot know where
    link("tok1", Checkpoint.resolve(str(checkpoint)))
    assert _wait_for_heartbeat(checkpoint)
    beat = read_heartbeat(Checkpoint.resolve(str(checkpoint)))
    assert beat is not None and beat.token == "tok1"
    assert beating(Checkpoint.resolve(str(checkpoint)))


def test_a_stale_heartbeat_says_not_running(checkpoint: Path) -> None:
    write_heartbeat(Checkpoint.resolve(str(checkpoint)), "tok")
    beat = read_heartbeat(Checkpoint.resolve(str(checkpoint)))
    assert beat is not None
    assert beating(Checkpoint.resolve(str(checkpoint)), now_s=beat.at_ms / 1000 + 1)
    assert not beating(Checkpoint.resolve(str(checkpoint)), now_s=beat.at_ms / 1000 + 60)
    (checkpoint / "unaligned" / "source-heartbeat.json").write_text("{half")
    assert read_heartbeat(Checkpoint.resolve(str(checkpoint))) is None and not beating(
        Checkpoint.resolve(str(checkpoint))
    )


def test_a_deleted_checkpoint_is_never_recreated(checkpoint: Path) -> None:
    (checkpoint / "metadata").unlink()
    write_heartbeat(Checkpoint.resolve(str(checkpoint)), "tok")
    assert not (checkpoint / "unaligned").exists()


def test_a_beating_heartbeat_pickles_without_its_thread(checkpoint: Path) -> None:
    heartbeat = SourceHeartbeat(interval_s=0.02)
    heartbeat.watch("tok2")
    copy = pickle.loads(pickle.dumps(heartbeat))
    assert copy._thread is None and copy._token is None
