"""The official Spark jars of Iceberg and Delta for the table benchmark, fetched by Maven.

``ensure_table_jars()`` runs ``mvn package`` in ``jvm-shim/table-peer`` once (offline first,
then online; cached by a stamp over the pom and pyspark's version) and returns the jars for
``spark.jars``: ``iceberg-spark-runtime-<spark>_2.13``, ``delta-spark_<spark>_2.13`` and
``delta-storage``. Their versions are the pom's properties (the newest each project publishes,
built for Spark 4.1: neither publishes a Spark 4.3 build yet).

``python -m benchmarks.table_peer_jars`` builds them and prints the jars.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TABLE_PEER_DIR = Path(__file__).resolve().parents[2] / "jvm-shim" / "table-peer"
STAMP_NAME = "table-peer.stamp"


class TableJarsError(RuntimeError):
    """Maven could not fetch the table jars."""


@dataclass(frozen=True)
class TableJars:
    jars: tuple[Path, ...]
    versions: dict[str, str]
    """artifact -> version, e.g. ``{"iceberg-spark-runtime-4.1_2.13": "1.12.0", ...}``"""

    def spark_jars(self) -> str:
        return ",".join(str(jar) for jar in self.jars)


def _jars(directory: Path) -> TableJars | None:
    jars = tuple(sorted((directory / "target" / "lib").glob("*.jar")))
    versions = {}
    for jar in jars:
        match = re.match(r"^(?P<a>.+)-(?P<v>\d+(?:\.\d+)+)\.jar$", jar.name)
        if match:
            versions[match["a"]] = match["v"]
    wanted = ("iceberg-spark-runtime", "delta-spark", "delta-storage")
    if not all(any(a.startswith(w) for a in versions) for w in wanted):
        return None
    return TableJars(jars, versions)


def _fingerprint(directory: Path) -> str:
    import pyspark

    digest = hashlib.sha256(f"pyspark {pyspark.__version__}\0".encode())
    digest.update((directory / "pom.xml").read_bytes())
    return digest.hexdigest()


def ensure_table_jars(directory: Path = TABLE_PEER_DIR) -> TableJars:
    """The jars, built by Maven unless a build for this pom exists."""
    fingerprint = _fingerprint(directory)
    stamp = directory / "target" / STAMP_NAME
    if stamp.exists() and stamp.read_text().strip() == fingerprint and (made := _jars(directory)):
        return made
    mvn = shutil.which("mvn")
    if mvn is None:
        raise TableJarsError("mvn is not on PATH (Debian package maven)")
    (directory / "target").mkdir(exist_ok=True)
    with open(directory / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building right now
        output = ""
        for offline in (True, False):
            shutil.rmtree(directory / "target" / "lib", ignore_errors=True)
            result = subprocess.run(
                [mvn, "-B", "-q", *(["-o"] if offline else []), "package"],
                cwd=directory,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if result.returncode == 0 and (made := _jars(directory)):
                stamp.write_text(fingerprint + "\n")
                return made
            output = result.stdout
        tail = "\n".join(output.splitlines()[-5:])
        raise TableJarsError(f"Maven fetched no Iceberg and Delta jars:\n{tail}")


def main() -> int:
    try:
        made = ensure_table_jars()
    except TableJarsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for jar in made.jars:
        print(f"  {jar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
