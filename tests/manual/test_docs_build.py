"""The manual's build is strict: the site builds as committed, and a link to a missing page or to
a heading that does not exist fails it (what ``./dev lint`` relies on to fail CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")  # the lint extra; CI installs it

ROOT = Path(__file__).resolve().parents[2]


def _build(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tree / "site")],
        cwd=tree,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("mkdocs.yml", "ARCHITECTURE.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_the_manual_builds_and_a_broken_link_or_anchor_fails_it(tree: Path) -> None:
    built = _build(tree)
    assert built.returncode == 0, built.stderr[-3000:]

    index = tree / "docs" / "index.md"
    original = index.read_text()
    index.write_text(original + "\n[gone](guides/no-such-page.md)\n")
    broken = _build(tree)
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr

    index.write_text(original + "\n[gone](operations/versions.md#no-such-heading)\n")
    broken = _build(tree)
    assert broken.returncode != 0 and "no-such-heading" in broken.stderr
