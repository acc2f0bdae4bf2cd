"""The test registry's launcher: which Java it runs on (the server itself runs in the
integration tests: integration/test_registry_formats.py)."""

from __future__ import annotations

import pytest

from unaligned.errors import EmbeddedRegistryError
from unaligned.testing import registry_server


def test_a_java_too_old_for_the_registry_is_refused_naming_where_it_looked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_server, "java_version", lambda java: 17)
    with pytest.raises(EmbeddedRegistryError, match="needs Java 21 or newer") as refused:
        registry_server.find_java()
    assert "$UNALIGNED_REGISTRY_JAVA" in str(refused.value)


def test_the_chosen_java_is_new_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"/old/bin/java": 17, "/new/bin/java": 25}
    monkeypatch.setenv("UNALIGNED_REGISTRY_JAVA", "/old/bin/java")
    monkeypatch.setenv("JAVA_HOME", "/new")
    monkeypatch.setattr(registry_server, "java_version", lambda java: versions.get(java))
    assert registry_server.find_java() == "/new/bin/java"


def test_java_version_reads_both_numbering_schemes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Done:
        def __init__(self, stderr: str) -> None:
            self.stderr = stderr

    for text, version in (
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
    ):
        monkeypatch.setattr(registry_server.subprocess, "run", lambda *a, t=text, **k: Done(t))
        assert registry_server.java_version("java") == version
