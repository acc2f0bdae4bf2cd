"""unaligned.testing.shim_build without Maven or a JDK: locating the shim, fingerprints, build
decisions (fake ``mvn`` and ``java`` on PATH)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from unaligned.errors import EmbeddedKafkaError
from unaligned.testing import shim_build

# --- locating and building the shim --------------------------------------------------------------


def test_shim_dir_defaults_to_the_repository_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(shim_build.SHIM_DIR_ENV, raising=False)
    assert (shim_build.shim_dir() / "pom.xml").is_file()
    assert shim_build.shim_dir().name == "jvm-shim"


def test_shim_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(shim_build.SHIM_DIR_ENV, str(tmp_path))
    assert shim_build.shim_dir() == tmp_path.resolve()


def _fake_shim(tmp_path: Path) -> Path:
    shim = tmp_path / "shim"
    (shim / "src" / "main" / "java").mkdir(parents=True)
    (shim / "pom.xml").write_text("<project/>")
    (shim / "src" / "main" / "java" / "A.java").write_text("class A {}")
    return shim


def test_fingerprint_follows_pom_and_sources_but_not_target(tmp_path: Path) -> None:
    shim = _fake_shim(tmp_path)
    first = shim_build.source_fingerprint(shim)
    (shim / "target").mkdir()
    (shim / "target" / "x.class").write_text("built")
    assert shim_build.source_fingerprint(shim) == first
    (shim / "src" / "main" / "java" / "A.java").write_text("class A { int x; }")
    second = shim_build.source_fingerprint(shim)
    assert second != first
    (shim / "pom.xml").write_text("<project></project>")
    assert shim_build.source_fingerprint(shim) != second


def _tool_dir(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A directory with fake executables; ``tools`` maps a name to a shell script body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


# PATH holds only the fake tools, so the fake Maven uses no other command.
FAKE_MVN_OK = (
    f'exec "{sys.executable}" -c "'
    "import pathlib; t = pathlib.Path('target'); (t / 'lib').mkdir(parents=True, exist_ok=True); "
    "[(t / n).touch() for n in ('unaligned-jvm-shim-0.1.0.jar', 'lib/b.jar', 'lib/a.jar')]; "
    "f = open('../mvn-calls', 'a'); f.write('run\\n')"
    '"\n'
)


def test_ensure_built_builds_once_then_reuses_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": FAKE_MVN_OK})))

    build = shim_build.ensure_built(shim)
    again = shim_build.ensure_built(shim)

    assert [p.name for p in build.classpath] == ["unaligned-jvm-shim-0.1.0.jar", "a.jar", "b.jar"]
    assert again == build
    assert (tmp_path / "mvn-calls").read_text().count("run") == 1  # offline build succeeded
    assert build.classpath_arg().split(os.pathsep)[0].endswith("unaligned-jvm-shim-0.1.0.jar")


def test_ensure_built_rebuilds_after_a_source_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": FAKE_MVN_OK})))
    shim_build.ensure_built(shim)
    (shim / "src" / "main" / "java" / "A.java").write_text("class A { void changed() {} }")
    shim_build.ensure_built(shim)
    assert (tmp_path / "mvn-calls").read_text().count("run") == 2


def test_ensure_built_reports_the_tail_of_a_failed_maven_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    failing = (
        'i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; '
        'echo "[ERROR] boom"; exit 3\n'
    )
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": failing})))

    with pytest.raises(EmbeddedKafkaError) as raised:
        shim_build.ensure_built(shim)

    message = str(raised.value)
    assert "exit code 3" in message and str(shim) in message
    assert "[ERROR] boom" in message and "line 99" in message
    assert "line 5\n" not in message  # only the tail
    assert not (shim / "target" / shim_build.BUILD_STAMP_NAME).exists()


def test_maven_runs_offline_first_then_online(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    # Fails when offline (-o), builds when online; records its arguments.
    mvn = (
        'echo "$@" >> ../mvn-args\n'
        'case "$*" in *-o*) echo "[ERROR] offline: artifact missing"; exit 1;; esac\n' + FAKE_MVN_OK
    )
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": mvn})))

    shim_build.ensure_built(shim)

    calls = (tmp_path / "mvn-args").read_text().splitlines()
    assert len(calls) == 2
    assert "-o" in calls[0].split() and "-o" not in calls[1].split()
    assert calls[1].split()[-1] == "package"


@pytest.mark.parametrize("missing", ["java", "mvn"])
def test_ensure_built_names_a_missing_tool(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    present = {"java": "exit 0", "mvn": FAKE_MVN_OK}
    del present[missing]
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, present)))
    with pytest.raises(EmbeddedKafkaError, match=f"`{missing}` was not found"):
        shim_build.ensure_built(shim)


def test_ensure_built_without_a_pom_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedKafkaError, match=str(tmp_path)):
        shim_build.ensure_built(tmp_path)


def test_main_builds_on_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shim = _fake_shim(tmp_path)
    monkeypatch.setenv(shim_build.SHIM_DIR_ENV, str(shim))
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": FAKE_MVN_OK})))

    assert shim_build.main(["build"]) == 0
    assert "jvm-shim ready: 3 jars" in capsys.readouterr().out


def test_main_reports_usage_and_build_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shim_build.main([]) == 2
    assert "python -m unaligned.testing.shim_build build" in capsys.readouterr().err
    monkeypatch.setenv(shim_build.SHIM_DIR_ENV, str(tmp_path))  # no pom.xml
    assert shim_build.main(["build"]) == 1
    assert "no jvm-shim Maven module" in capsys.readouterr().err


def test_fetched_jars_are_the_builds_progress() -> None:
    line = (
        "Downloaded from repo: https://example.invalid/org/apache/kafka/kafka_2.13/4.2.0/"
        "kafka_2.13-4.2.0.jar (6.5 MB at 2.1 MB/s)"
    )
    assert shim_build.fetched_jar(line) == "kafka_2.13-4.2.0.jar (6.5 MB)"
    assert (
        shim_build.fetched_jar("Downloaded from repo: https://x.invalid/a/b-1.pom (2 kB)") is None
    )
    assert shim_build.fetched_jar("[INFO] BUILD SUCCESS") is None
