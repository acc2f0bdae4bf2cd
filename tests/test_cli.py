"""The ``unaligned`` command line: argument parsing and the demo's sample data. The demo itself
(broker + Spark) is not run here: ``run_demo`` is replaced by a recorder of its arguments."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from unaligned import cli


@pytest.fixture
def demo_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def record(records: int, partitions: int, workdir: Path) -> int:
        calls.append(
            {
                "records": records,
                "partitions": partitions,
                "workdir": workdir,
                "workdir_existed": workdir.is_dir(),
            }
        )
        return 0

    monkeypatch.setattr(cli, "run_demo", record)
    return calls


def test_a_command_is_required(capsys: pytest.CaptureFixture[str], demo_calls: list) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 2
    assert "command" in capsys.readouterr().err
    assert demo_calls == []


def test_unknown_command_is_refused(capsys: pytest.CaptureFixture[str], demo_calls: list) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bogus"])
    assert exit_info.value.code == 2
    assert "bogus" in capsys.readouterr().err
    assert demo_calls == []


def test_help_lists_the_commands_in_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "broker", "inspect", "report", "stop", "metrics"):
        assert command in out
    assert "``" not in out and ":mod:" not in out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import unaligned

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"unaligned {unaligned.__version__}"


def test_the_version_is_written_once_and_read_by_the_packaging() -> None:
    import configparser

    import unaligned

    root = Path(__file__).resolve().parents[1]
    config = configparser.ConfigParser()
    config.read(root / "setup.cfg")
    assert config["metadata"]["version"] == "attr: unaligned.__version__"
    changelog = (root / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released, "no released version with a date in CHANGELOG.md"
    version = unaligned.__version__
    development = re.fullmatch(r"(\d+\.\d+\.\d+)\.dev\d+", version)
    if development is None:  # a release: its section is the newest one with a date
        assert version == released[0]
    else:  # a development build: never a released number, and [Unreleased] says what it becomes
        assert development.group(1) not in released
        unreleased = changelog[changelog.index("## [Unreleased]") :].split("\n## [")[0]
        assert f"What will be {development.group(1)}" in unreleased


def test_broker_passes_port_and_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    from unaligned.testing import local_broker

    calls: list[tuple[int, list[local_broker.TopicSpec]]] = []
    monkeypatch.setattr(
        local_broker, "serve", lambda port, topics: calls.append((port, topics)) or 0
    )
    assert cli.main(["broker", "--port", "0", "--topic", "in:4", "--topic", "out"]) == 0
    assert calls == [(0, [local_broker.TopicSpec("in", 4), local_broker.TopicSpec("out", 1)])]


def test_broker_refuses_a_bad_topic(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from unaligned.testing import local_broker

    monkeypatch.setattr(local_broker, "serve", lambda port, topics: pytest.fail("started"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["broker", "--topic", "in:none"])
    assert exit_info.value.code == 2
    assert "--topic" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--records", "--partitions"])
def test_non_integer_counts_are_refused_naming_the_flag(
    flag: str, capsys: pytest.CaptureFixture[str], demo_calls: list
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", flag, "many"])
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err
    assert demo_calls == []


@pytest.mark.parametrize(
    "args", [["--partitions", "0"], ["--partitions", "-2"], ["--records", "-1"]]
)
def test_counts_below_the_minimum_are_usage_errors(args: list[str], demo_calls: list) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", *args])
    assert exit_info.value.code == 2
    assert demo_calls == []


def test_demo_defaults_run_in_a_new_temporary_directory_kept_afterwards(
    demo_calls: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(cli.tempfile, "tempdir", None)  # re-read TMPDIR
    assert cli.main(["demo"]) == 0
    (call,) = demo_calls
    assert (call["records"], call["partitions"]) == (4_000, 4)
    assert call["workdir_existed"]
    assert call["workdir"].name.startswith("unaligned-demo-")
    assert call["workdir"].parent == tmp_path
    assert call["workdir"].is_dir()  # the summary's paths still exist after the demo


def test_demo_with_a_workdir_creates_and_keeps_it(
    tmp_path: Path, demo_calls: list[dict[str, Any]]
) -> None:
    workdir = tmp_path / "a" / "b"
    assert (
        cli.main(["demo", "--records", "10", "--partitions", "3", "--workdir", str(workdir)]) == 0
    )
    assert demo_calls == [
        {"records": 10, "partitions": 3, "workdir": workdir, "workdir_existed": True}
    ]
    assert workdir.is_dir()


def test_demo_exit_status_is_the_demos(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli, "run_demo", lambda records, partitions, workdir: 1)
    assert cli.main(["demo", "--workdir", str(tmp_path)]) == 1


def test_abandon_waits_for_a_just_stopped_querys_heartbeat_and_refuses_a_running_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from unaligned.finishing import heartbeat

    (tmp_path / "metadata").write_text('{"id":"q"}\n')
    monkeypatch.setattr(heartbeat, "STALE_S", 0.2)
    monkeypatch.setattr(heartbeat, "INTERVAL_S", 0.1)
    monkeypatch.setattr(heartbeat, "beating", lambda checkpoint: True)
    args = ["abandon", str(tmp_path), "--batch", "1", "--skip", "--bootstrap-servers", "h:1"]
    assert cli.main(args) == 2
    assert "is running" in capsys.readouterr().err
    beats = iter([True, True, False])
    monkeypatch.setattr(heartbeat, "beating", lambda checkpoint: next(beats))
    assert cli.main(args) == 1  # the heartbeat went stale: on to the batch, which has no record
    assert "never decided" in capsys.readouterr().err
    assert cli.main(args[:-2]) == 2
    assert "--bootstrap-servers is required" in capsys.readouterr().err
