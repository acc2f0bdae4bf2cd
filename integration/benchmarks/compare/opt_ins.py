"""The Spark set-ups workload 4 runs every contender in: as shipped, and with both start-up
opt-ins applied by the one step a user takes (``unaligned tune-spark``, README "Start-up and
restarts").

- ``as shipped``: the pip-installed pyspark's Spark home, no extra setting; when its zips were
  tuned (``./dev test`` runs ``unaligned tune-spark`` on this checkout's environment), a
  private Spark home with the original zips that command kept (:func:`shipped_spark_home`);
- ``bytecode``, ``daemon``: each opt-in alone (not run unless named in
  ``UNALIGNED_BENCH_SETUPS``): the tuned Spark home below without the setting, or the setting
  with the Spark home as shipped;
- ``opt-ins``: a private Spark home (:func:`tuned_spark_home`: symlinks to the pip-installed
  pyspark's entries, with ``python/lib`` a directory of its own holding *copies* of
  ``pyspark.zip`` and the py4j zip), tuned by ``unaligned tune-spark --spark-home`` (bytecode in
  the copied zips), and the setting that command prints
  (``spark.python.daemon.module=unaligned.tuning.preloading_daemon``). The child query process gets
  ``SPARK_HOME`` pointing there, so its JVM puts the tuned zips on its Python workers' path; the
  virtual environment's pyspark is never modified.

:func:`compile_installed_package` gives the package the bytecode an install has: ``pip install``
compiles every module of a wheel, but this checkout's package is an editable install, and with
``PYTHONDONTWRITEBYTECODE`` set (as on the CI machines) every Spark Python process would compile
our modules from source again, a cost no user's installation has.
"""

from __future__ import annotations

import compileall
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from unaligned.tuning.spark_tuning import DAEMON_SETTING


@dataclass(frozen=True)
class Setup:
    """A Spark set-up of the child query processes."""

    name: str
    spark_home: str = ""
    """``SPARK_HOME`` of the child (empty: the pip-installed pyspark's)."""
    spark_conf: Mapping[str, str] = field(default_factory=dict)


def pyspark_home() -> Path:
    """The pip-installed pyspark package directory (a usable Spark home)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _private_spark_home(root: Path) -> Path:
    """A Spark home at ``root``: symlinks to every entry of the pyspark package directory but
    ``python/lib``, which holds copies of its zips as shipped (the ``<zip>.orig`` that
    ``unaligned tune-spark`` kept, if it ran there)."""
    source = pyspark_home()
    root.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name in ("work", "__pycache__", "python"):
            continue
        (root / entry.name).symlink_to(entry)
    python = root / "python"
    python.mkdir()
    for entry in (source / "python").iterdir():
        if entry.name != "lib":
            (python / entry.name).symlink_to(entry)
    lib = python / "lib"
    lib.mkdir()
    for archive in (source / "python" / "lib").glob("*.zip"):
        original = archive.with_name(archive.name + ".orig")
        shutil.copy2(original if original.exists() else archive, lib / archive.name)
    return root


def shipped_spark_home(root: Path) -> str:
    """``SPARK_HOME`` as shipped: empty (the pip-installed pyspark's) unless its zips were
    tuned, then a private Spark home at ``root`` with the originals."""
    tuned = any((pyspark_home() / "python" / "lib").glob("*.zip.orig"))
    return str(_private_spark_home(root)) if tuned else ""


def tuned_spark_home(root: Path) -> Path:
    """A Spark home at ``root`` as :func:`_private_spark_home` makes it, then
    ``unaligned tune-spark`` on it (the one step a user takes)."""
    _private_spark_home(root)
    command = Path(sys.executable).parent / "unaligned"
    subprocess.run(
        [str(command), "tune-spark", "--spark-home", str(root)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return root


SETUPS = ("shipped", "bytecode", "daemon", "opt-ins")
"""Every set-up by name; the benchmark runs ``shipped`` and ``opt-ins`` unless told otherwise."""


def setups(names: Sequence[str], root: Path) -> list[Setup]:
    """The set-ups ``names`` (of :data:`SETUPS`), the Spark homes they need built under ``root``
    once (module docstring)."""
    key, value = DAEMON_SETTING
    home = str(tuned_spark_home(root / "tuned")) if {"bytecode", "opt-ins"} & set(names) else ""
    shipped = shipped_spark_home(root / "shipped") if {"shipped", "daemon"} & set(names) else ""
    made = {
        "shipped": Setup("as shipped", shipped),
        "bytecode": Setup("bytecode", home),
        "daemon": Setup("daemon", shipped, {key: value}),
        "opt-ins": Setup("opt-ins", home, {key: value}),
    }
    return [made[name] for name in SETUPS if name in names]


def compile_installed_package() -> None:
    """Bytecode for the package and the benchmarks, as an install has it (module docstring)."""
    for package in ("pyspark_unaligned", "unaligned", "benchmarks"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"package {package} not found")
        compileall.compile_dir(Path(spec.origin).parent, quiet=1)
