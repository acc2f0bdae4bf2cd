"""The ``unaligned`` command line: argument parsing and the demo's sample data. The demo itself
(broker + Spark) is not run here: ``run_demo`` is replaced by a recorder of its arguments."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
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


def test_help_lists_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


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


def test_demo_defaults_run_in_a_temporary_directory_removed_afterwards(
    demo_calls: list[dict[str, Any]],
) -> None:
    assert cli.main(["demo"]) == 0
    (call,) = demo_calls
    assert (call["records"], call["partitions"]) == (20_000, 4)
    assert call["workdir_existed"]
    assert call["workdir"].name.startswith("unaligned-demo-")
    assert not call["workdir"].exists()


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


# --- the demo's sample data -----------------------------------------------------------------------


class ProduceRecorder:
    """Keeps the rows handed to ``produce`` (the demo's only use of the broker here)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.topics: list[str] = []

    def produce(self, topic: str, records: Iterable[tuple[Any, ...]]) -> None:
        self.topics.append(topic)
        self.rows.extend(records)


def test_sample_is_round_robin_and_the_count_matches_what_was_produced() -> None:
    broker = ProduceRecorder()
    counts = cli._produce_sample(broker, "demo-input", partitions=4, records=10)
    assert broker.topics == ["demo-input"]
    assert [row[0] for row in broker.rows] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    # The demo's exactly-once check compares these counts with what it reads back.
    assert counts == Counter(row[0] for row in broker.rows) == Counter({0: 3, 1: 3, 2: 2, 3: 2})


def test_sample_values_are_distinct_and_rows_well_formed() -> None:
    broker = ProduceRecorder()
    cli._produce_sample(broker, "demo-input", partitions=3, records=50)
    values = [row[2] for row in broker.rows]
    # The demo counts distinct values to detect duplicates: every value must be unique.
    assert len(set(values)) == 50
    for _partition, key, value, headers, timestamp_ms in broker.rows:
        assert isinstance(key, bytes) and key.startswith(b"sensor-")
        assert isinstance(value, bytes) and value.startswith(b'{"seq": ')
        assert headers == [("source", b"demo")]
        assert isinstance(timestamp_ms, int)
    timestamps = [row[4] for row in broker.rows]
    assert timestamps == sorted(timestamps) and len(set(timestamps)) == 50


def test_metrics_prints_a_checkpoints_barriers_as_json_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import json

    from unaligned.barriers.metrics import TaskBarrierStats, aggregate, write_metrics

    stats = TaskBarrierStats(task_index=0, start_ms=1_000, cut=False, rows_written=5)
    for batch in (0, 1):
        write_metrics(str(tmp_path), aggregate(batch, 1_000, 2_000, [stats]))
    assert cli.main(["metrics", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["batch_id"] for line in lines] == [0, 1]


def test_stop_refuses_a_path_that_is_not_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["stop", str(tmp_path), "--drain"]) == 2
    assert "is not a streaming query's checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "unaligned").exists()  # no request recorded


def test_stop_that_nobody_honours_times_out_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNALIGNED_IDLE_BARRIER_DIR", str(tmp_path / "hints"))
    (tmp_path / "metadata").write_text('{"id":"q"}')
    assert cli.main(["stop", str(tmp_path), "--timeout", "0.3"]) == 3
    assert "no barrier of the query honoured the stop request" in capsys.readouterr().err
    assert (tmp_path / "unaligned" / "stop.json").exists()
