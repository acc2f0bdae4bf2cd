"""Locations: paths, ``file:`` URIs and children, resolved to a ``pyarrow.fs`` filesystem."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from unaligned._util.fs import resolve_location
from unaligned.errors import OptionError


def test_resolve_location_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = resolve_location("cp")
    assert relative.path == str(tmp_path / "cp")
    assert isinstance(relative.filesystem, pafs.LocalFileSystem)
    for uri in (f"file:{tmp_path}/cp", f"file://{tmp_path}/cp"):
        assert resolve_location(uri).path == str(tmp_path / "cp")
    child = resolve_location(f"file://{tmp_path}/cp").child("a", "b")
    assert child.uri == f"file://{tmp_path}/cp/a/b"
    assert resolve_location(child.uri).path == child.path
    with pytest.raises(OptionError, match="nosuchscheme://x"):
        resolve_location("nosuchscheme://x")
