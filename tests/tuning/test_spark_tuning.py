"""``unaligned tune-spark`` on a Spark home of its own: bytecode added once, reported, undone."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from unaligned.cli import main
from unaligned.errors import OptionError
from unaligned.tuning.spark_tuning import check_worker_python, zip_states


def spark_home(tmp_path: Path) -> Path:
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "pyspark.zip", "w") as archive:
        archive.writestr("pyspark/__init__.py", "X = 1\n")
        archive.writestr("pyspark/sql/functions.py", "def f():\n    return 2\n")
    return tmp_path / "spark"


def test_bytecode_is_added_once_reported_and_undone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    home = spark_home(tmp_path)
    zip_path = home / "python" / "lib" / "pyspark.zip"
    original = zip_path.read_bytes()
    assert main(["tune-spark", "--spark-home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "2 modules compiled" in out and "spark.python.daemon.module" in out
    (state,) = zip_states(home)
    assert state.has_bytecode and state.original_kept
    with zipfile.ZipFile(zip_path) as archive:
        assert "pyspark/__init__.pyc" in archive.NameToInfo
    assert main(["tune-spark", "--spark-home", str(home)]) == 0  # idempotent
    assert "already holds bytecode" in capsys.readouterr().out
    assert main(["tune-spark", "--spark-home", str(home), "--check"]) == 0
    assert "holds bytecode" in capsys.readouterr().out
    assert main(["tune-spark", "--spark-home", str(home), "--undo"]) == 0
    assert zip_path.read_bytes() == original and not zip_states(home)[0].has_bytecode


def test_bytecode_for_another_python_than_the_workers_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "python3.99"
    other.write_text("")
    with pytest.raises(OptionError, match="PYSPARK_PYTHON"):
        check_worker_python({"PYSPARK_PYTHON": str(other)})
    check_worker_python({"PYSPARK_PYTHON": sys.executable})
    check_worker_python({})
