"""Opt-in: bytecode inside Spark's ``pyspark.zip``, so that every Python worker imports it faster.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and ``py4j-*-src.zip``) first on the
``PYTHONPATH`` of every Python process it starts (task workers, the data source planners, the
streaming source runner, the sink's commit runner). Those zips carry sources only, so each new
process compiles the pyspark modules it imports; Python's zip importer uses a ``<module>.pyc``
stored next to ``<module>.py`` inside the zip when there is one.

``python -m unaligned.tuning.pyspark_bytecode [--spark-home DIR] [--check]`` adds such ``.pyc``
files, compiled by the running interpreter (run it with the Python of ``PYSPARK_PYTHON``):

- Only appended: every existing entry keeps its bytes and offset, and the new zip replaces the
  old one by an atomic rename (the old one is kept as ``<zip>.orig``), so a process that has
  the old zip open still reads it correctly.
- Checked hash-based ``.pyc`` files (PEP 552): a ``.pyc`` whose source changed, or one written
  by another Python version, is ignored and the source is compiled as before.
- Idempotent: a zip that already holds bytecode of this Python is left alone. One that holds
  another Python's keeps it (useless to this one, never wrong): move ``<zip>.orig`` back first.

It changes the Spark installation: run it where Spark is installed, on every node that runs
Python workers (on YARN the submitting host's zip is the one shipped). Undo by moving
``<zip>.orig`` back while no Spark application runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import py_compile
import shutil
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from unaligned.errors import OptionError

_MARKER = "unaligned-bytecode-{tag}.txt"
"""An entry naming the Python whose bytecode the zip holds (``sys.implementation.cache_tag``)."""


@dataclass(frozen=True)
class ZipResult:
    """What :func:`add_bytecode` did to one zip."""

    path: Path
    compiled: int
    already_done: bool


def spark_python_zips(spark_home: Path) -> list[Path]:
    """``pyspark.zip`` and ``py4j-*-src.zip`` under ``<spark_home>/python/lib``."""
    lib = spark_home / "python" / "lib"
    zips = sorted(
        p for p in lib.glob("*.zip") if p.name == "pyspark.zip" or p.name.startswith("py4j")
    )
    if not zips:
        raise OptionError(f"no pyspark.zip under {lib}: is {spark_home} a Spark home?")
    return zips


def default_spark_home() -> Path:
    """``SPARK_HOME``, else the directory of the installed ``pyspark`` package (a pip install)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise OptionError("neither SPARK_HOME nor an installed pyspark package was found")
    return Path(spec.origin).parent


def _marker() -> str:
    return _MARKER.format(tag=sys.implementation.cache_tag)


def has_bytecode(path: Path) -> bool:
    """Whether ``path`` already holds this interpreter's bytecode (added by this module)."""
    with zipfile.ZipFile(path) as archive:
        return _marker() in archive.NameToInfo


def _compile(source: bytes, shown_as: str, scratch: Path) -> bytes:
    """A checked hash-based ``.pyc`` of ``source`` (PEP 552); tracebacks show ``shown_as``."""
    py = scratch / "module.py"
    pyc = scratch / "module.pyc"
    py.write_bytes(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's own SyntaxWarnings: shown when it runs
        py_compile.compile(
            str(py),
            cfile=str(pyc),
            dfile=shown_as,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    return pyc.read_bytes()


def add_bytecode(path: Path) -> ZipResult:
    """Append a ``.pyc`` for every ``.py`` of the zip at ``path`` (see the module docstring)."""
    if has_bytecode(path):
        return ZipResult(path, 0, already_done=True)
    backup = path.with_name(path.name + ".orig")
    staged = path.with_name(path.name + ".unaligned-tmp")
    shutil.copy2(path, staged)
    compiled = 0
    try:
        with (
            tempfile.TemporaryDirectory(prefix="unaligned-pyc-") as scratch,
            zipfile.ZipFile(staged, mode="a") as archive,
        ):
            names = set(archive.NameToInfo)
            for info in list(archive.infolist()):
                if not info.filename.endswith(".py") or "/tests/" in info.filename:
                    continue  # pyspark's own tests: never imported by a worker
                target = info.filename + "c"
                if target in names:
                    continue
                try:
                    shown_as = f"{path}/{info.filename}"
                    data = _compile(archive.read(info), shown_as, Path(scratch))
                except py_compile.PyCompileError:
                    continue  # left to the source, as Python does with such a file
                entry = zipfile.ZipInfo(target, date_time=info.date_time)
                entry.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(entry, data)
                compiled += 1
            archive.writestr(_marker(), f"{sys.version}\n")
        if not backup.exists():
            _keep_original(path, backup)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return ZipResult(path, compiled, already_done=False)


def _keep_original(path: Path, backup: Path) -> None:
    """``backup``: the original bytes (a hard link where the file system has them)."""
    try:
        os.link(path, backup)
    except OSError:
        shutil.copy2(path, backup)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m unaligned.tuning.pyspark_bytecode",
        description="Add bytecode to Spark's pyspark.zip and py4j zip (docs: Sizing).",
    )
    parser.add_argument(
        "--spark-home", type=Path, help="default: SPARK_HOME or pyspark's directory"
    )
    parser.add_argument(
        "--check", action="store_true", help="only report whether the zips hold bytecode"
    )
    args = parser.parse_args(argv)
    spark_home = args.spark_home or default_spark_home()
    for path in spark_python_zips(spark_home):
        if args.check:
            state = "has" if has_bytecode(path) else "has no"
            print(f"{path}: {state} bytecode of {sys.implementation.cache_tag}")
            continue
        result = add_bytecode(path)
        if result.already_done:
            print(f"{path}: already holds bytecode of {sys.implementation.cache_tag}")
        else:
            print(f"{path}: {result.compiled} modules compiled (original kept as {path.name}.orig)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
