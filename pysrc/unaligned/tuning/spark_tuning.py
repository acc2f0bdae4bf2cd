"""``unaligned tune-spark``: the start-up opt-ins as one step a user takes once per Spark install.

Every start and restart of a query runs Spark's Python processes one after the other (the data
source lookup, the planners, the source runner, task workers, the commit runner); most of their
start-up is importing pyspark and kafka-python. Two opt-ins remove most of it (the figures:
docs/operations/sizing.md, "Start-up and restarts"):

1. bytecode in Spark's ``pyspark.zip`` and py4j zip (:mod:`unaligned.tuning.pyspark_bytecode`): safe
   to apply to an installation (only appended, checked ``.pyc`` files, the original kept as
   ``<zip>.orig``), so this command applies it, idempotently, and ``--undo`` puts the originals
   back;
2. the preloading daemon (:mod:`unaligned.tuning.preloading_daemon`): a Spark setting of the
   application, so this command prints it for ``spark-defaults.conf`` / ``--conf`` /
   ``SparkSession.builder.config`` rather than changing anyone's configuration.

``--check`` reports both without changing anything. The bytecode must be compiled by the Python
that runs Spark's workers (``PYSPARK_PYTHON``): the command refuses another one, naming both.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from unaligned.errors import OptionError
from unaligned.tuning.pyspark_bytecode import (
    add_bytecode,
    default_spark_home,
    has_bytecode,
    spark_python_zips,
)

DAEMON_SETTING = ("spark.python.daemon.module", "unaligned.tuning.preloading_daemon")


@dataclass(frozen=True)
class ZipState:
    path: Path
    has_bytecode: bool
    original_kept: bool


def zip_states(spark_home: Path) -> list[ZipState]:
    """Each Python zip of ``spark_home``: whether it holds this Python's bytecode, and whether
    its original is kept beside it."""
    return [
        ZipState(p, has_bytecode(p), p.with_name(p.name + ".orig").exists())
        for p in spark_python_zips(spark_home)
    ]


def check_worker_python(environ: dict[str, str] | None = None) -> None:
    """Refuse to compile for a Python other than the one Spark's workers run."""
    env = os.environ if environ is None else environ
    worker = env.get("PYSPARK_PYTHON")
    if not worker:
        return
    resolved = shutil.which(worker) or worker
    if Path(resolved).resolve() != Path(sys.executable).resolve():
        raise OptionError(
            f"PYSPARK_PYTHON is {worker!r} but this is {sys.executable}: run the command with "
            "the Python of Spark's workers (bytecode is per Python version)"
        )


def undo(spark_home: Path) -> list[Path]:
    """Put back every kept original zip (``<zip>.orig``); returns the zips restored. Run it
    while no Spark application uses the installation."""
    restored = []
    for path in spark_python_zips(spark_home):
        original = path.with_name(path.name + ".orig")
        if original.exists():
            os.replace(original, path)
            restored.append(path)
    return restored


def run(spark_home: Path | None, *, check: bool, revert: bool) -> int:
    """The command (module docstring); prints what it found and did."""
    home = spark_home or default_spark_home()
    if revert:
        restored = undo(home)
        for path in restored:
            print(f"{path}: original restored")
        if not restored:
            print(f"{home}: no original zip kept; nothing to undo")
        return 0
    if not check:
        check_worker_python()
    for state in zip_states(home):
        if check:
            note = "holds" if state.has_bytecode else "has no"
            print(f"{state.path}: {note} bytecode of {sys.implementation.cache_tag}")
            continue
        result = add_bytecode(state.path)
        if result.already_done:
            print(f"{state.path}: already holds bytecode of {sys.implementation.cache_tag}")
        else:
            print(
                f"{state.path}: {result.compiled} modules compiled "
                f"(original kept as {state.path.name}.orig; undo: unaligned tune-spark --undo)"
            )
    key, value = DAEMON_SETTING
    print(
        "\nThe preloading daemon is a setting of each Spark application (not changed here):\n"
        f"  spark-defaults.conf:  {key} {value}\n"
        f"  spark-submit:         --conf {key}={value}\n"
        f'  SparkSession:         .config("{key}", "{value}")'
    )
    return 0
