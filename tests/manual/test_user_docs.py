"""The user docs (README.md and docs/, the included architecture aside) carry no commit hash and
no issue number: they mean nothing to a user and go stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HASH = re.compile(r"`([0-9a-f]{7,40})`")
ISSUE = re.compile(r"\bissues? #?\d+\b", re.IGNORECASE)


def test_no_commit_hash_or_issue_number_in_the_user_docs() -> None:
    found = []
    for page in PAGES:
        text = page.read_text()
        found += [f"{page.name}: {h}" for h in HASH.findall(text) if not h.isdigit()]
        found += [f"{page.name}: {m}" for m in ISSUE.findall(text)]
    assert found == []
