"""pyspark_bytecode: .pyc files appended to a Spark python zip, used by Python's zip importer,
ignored when they do not match; existing entries keep their bytes and offsets."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from unaligned.errors import OptionError
from unaligned.tuning.pyspark_bytecode import add_bytecode, has_bytecode, main, spark_python_zips


def spark_home(tmp_path: Path) -> Path:
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "pyspark.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("fakespark/__init__.py", "ANSWER = 42\n")
        archive.writestr("fakespark/sub.py", "from fakespark import ANSWER\nDOUBLE = 2 * ANSWER\n")
        archive.writestr("fakespark/tests/test_x.py", "X = 1\n")
        archive.writestr("fakespark/broken.py", "def (:\n")
        archive.writestr("fakespark/data.txt", "not python\n")
    return tmp_path / "spark"


def import_from(zip_path: Path, module: str) -> tuple[str, str]:
    """In a fresh interpreter: (the file the zip importer loads ``module`` from, its value)."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(zip_path)!r})\n"
        f"import {module} as m\n"
        f"print(m.__loader__.get_filename({module!r}))\n"
        "print(getattr(m, 'DOUBLE', getattr(m, 'ANSWER', None)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    filename, value = done.stdout.split()
    return filename, value


def test_bytecode_is_appended_and_used(tmp_path: Path) -> None:
    home = spark_home(tmp_path)
    (zip_path,) = spark_python_zips(home)
    with zipfile.ZipFile(zip_path) as archive:
        before = {i.filename: (i.header_offset, i.CRC) for i in archive.infolist()}
    assert import_from(zip_path, "fakespark.sub")[0].endswith(".py")

    result = add_bytecode(zip_path)

    assert (result.compiled, result.already_done) == (2, False)  # not the tests, not broken.py
    with zipfile.ZipFile(zip_path) as archive:
        after = {i.filename: (i.header_offset, i.CRC) for i in archive.infolist()}
        assert archive.testzip() is None
    assert {name: after[name] for name in before} == before
    assert {"fakespark/__init__.pyc", "fakespark/sub.pyc"} < set(after)
    assert "fakespark/tests/test_x.pyc" not in after
    assert (zip_path.parent / "pyspark.zip.orig").read_bytes() != zip_path.read_bytes()
    assert import_from(zip_path, "fakespark.sub") == (f"{zip_path}/fakespark/sub.pyc", "84")
    assert import_from(zip_path, "fakespark")[0].endswith("__init__.pyc")
    assert has_bytecode(zip_path)
    assert add_bytecode(zip_path).already_done


def test_a_stale_pyc_is_ignored_and_the_source_used(tmp_path: Path) -> None:
    home = spark_home(tmp_path)
    (zip_path,) = spark_python_zips(home)
    add_bytecode(zip_path)
    changed = tmp_path / "changed.zip"
    with zipfile.ZipFile(zip_path) as old, zipfile.ZipFile(changed, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename == "fakespark/sub.py":
                data = b"from fakespark import ANSWER\nDOUBLE = 3 * ANSWER\n"
            new.writestr(info, data)
    assert import_from(changed, "fakespark.sub") == (f"{changed}/fakespark/sub.py", "126")


def test_main_reports_and_refuses_a_directory_without_zips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = spark_home(tmp_path)
    assert main(["--spark-home", str(home), "--check"]) == 0
    assert "has no bytecode" in capsys.readouterr().out
    assert main(["--spark-home", str(home)]) == 0
    assert "2 modules compiled" in capsys.readouterr().out
    assert main(["--spark-home", str(home), "--check"]) == 0
    assert ": has bytecode" in capsys.readouterr().out
    with pytest.raises(OptionError, match="no pyspark.zip"):
        main(["--spark-home", str(tmp_path / "nothing")])
