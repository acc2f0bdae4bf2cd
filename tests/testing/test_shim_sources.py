"""unaligned.testing.shim_sources: which jvm-shim directory is built, and the copy of the
packaged sources into the user cache an installed package builds in."""

from __future__ import annotations

from pathlib import Path

import pytest

from unaligned.testing import shim_sources


def _sources(root: Path) -> Path:
    (root / "src" / "main").mkdir(parents=True)
    (root / "pom.xml").write_text("<project/>")
    (root / "src" / "main" / "A.java").write_text("class A {}")
    (root / "target").mkdir()
    (root / "target" / "built.jar").write_text("not a source")
    return root


def test_the_checkout_module_is_built_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(shim_sources.SHIM_DIR_ENV, raising=False)
    assert shim_sources.shim_dir() == shim_sources.CHECKOUT_SHIM_DIR
    # the package data of the wheel is the same module (a symlink in the checkout)
    assert (shim_sources.PACKAGED_SOURCES / "pom.xml").read_bytes() == (
        shim_sources.CHECKOUT_SHIM_DIR / "pom.xml"
    ).read_bytes()


def test_an_installed_package_builds_a_copy_in_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packaged = _sources(tmp_path / "site-packages" / "jvm_shim")
    monkeypatch.delenv(shim_sources.SHIM_DIR_ENV, raising=False)
    monkeypatch.setenv(shim_sources.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(shim_sources, "CHECKOUT_SHIM_DIR", tmp_path / "no-checkout")
    monkeypatch.setattr(shim_sources, "PACKAGED_SOURCES", packaged)

    built_in = shim_sources.shim_dir()

    assert built_in.parent == tmp_path / "cache"
    assert built_in.name.startswith("jvm-shim-")
    assert (built_in / "src" / "main" / "A.java").read_text() == "class A {}"
    assert not (built_in / "target").exists()  # sources only
    assert shim_sources.shim_dir() == built_in  # copied once
    (packaged / "src" / "main" / "A.java").write_text("class A { int changed; }")
    assert shim_sources.shim_dir() != built_in  # new sources: a new build directory


def test_the_cache_follows_xdg_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(shim_sources.CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shim_sources.user_cache_dir() == (tmp_path / "xdg" / "unaligned").resolve()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert shim_sources.user_cache_dir() == (tmp_path / "home" / ".cache" / "unaligned").resolve()


def test_another_kafka_version_builds_from_a_copy_whose_pom_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "jvm-shim"
    (base / "src" / "main").mkdir(parents=True)
    (base / "src" / "main" / "A.java").write_text("class A {}")
    (base / "pom.xml").write_text("<p><kafka.version>4.4.0</kafka.version></p>")
    monkeypatch.setenv(shim_sources.CACHE_DIR_ENV, str(tmp_path / "cache"))

    assert shim_sources.versioned_shim_dir("4.4.0", base) == base  # the pom's own version
    copy = shim_sources.versioned_shim_dir("3.6.2", base)
    assert copy.parent == tmp_path / "cache" and copy.name.startswith("jvm-shim-kafka-3.6.2-")
    assert shim_sources.kafka_version(copy) == "3.6.2"
    assert shim_sources.kafka_version(base) == "4.4.0"  # the default build is left alone
    assert (copy / "src" / "main" / "A.java").read_text() == "class A {}"
    assert shim_sources.versioned_shim_dir("3.6.2", base) == copy  # made once
    with pytest.raises(ValueError, match="like 3.6.2"):
        shim_sources.versioned_shim_dir("latest", base)


def test_the_checkout_pom_names_the_default_kafka_version() -> None:
    assert shim_sources.kafka_version(shim_sources.CHECKOUT_SHIM_DIR) == "4.4.0"


def test_a_pom_for_kafka_3_6_leaves_out_what_that_release_does_not_publish() -> None:
    pom = (shim_sources.CHECKOUT_SHIM_DIR / "pom.xml").read_text()
    old = shim_sources.versioned_pom(pom, "3.6.2")
    assert "<kafka.version>3.6.2</kafka.version>" in old
    assert "<artifactId>kafka-server</artifactId>" not in old  # published from 3.7 on
    assert "<artifactId>kafka-server-common</artifactId>" in old
    assert "<artifactId>kafka-server</artifactId>" in shim_sources.versioned_pom(pom, "4.0.0")
