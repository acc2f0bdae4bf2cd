"""Spark's own Kafka connector (``format("kafka")``) for the benchmarks, fetched by Maven.

``ensure_connector()`` runs ``mvn package`` in ``jvm-shim/peer`` once (cached by a stamp over the
pom, this recipe and pyspark's version; later calls run no Maven) and returns the jars to pass as
``spark.jars``: ``spark-sql-kafka-0-10_2.13``, ``spark-token-provider-kafka-0-10_2.13``,
``kafka-clients`` and ``commons-pool2``, nothing that pyspark's own ``jars/`` already holds
(scala, slf4j, lz4, hadoop-client, ...). The connector's version is pyspark's own when Maven can
resolve it, else the pom's ``spark.version`` (the newest 4.x published). Nothing is resolved at
query time (no ``spark.jars.packages``).

``python -m benchmarks.peer_connector`` builds it and prints the jars.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PEER_DIR = Path(__file__).resolve().parents[2] / "jvm-shim" / "peer"
RECIPE = "1"  # bump when the build steps below change: forces a rebuild
STAMP_NAME = "peer-connector.stamp"

REQUIRED_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)
"""Exactly the artifacts the pom copies (its ``includeArtifactIds``)."""

_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d+\.\d+[^/]*)\.jar$")


class ConnectorError(RuntimeError):
    """Maven failed, or left a set of jars that would not work beside pyspark's."""


@dataclass(frozen=True)
class PeerConnector:
    spark_version: str
    jars: tuple[Path, ...]

    def spark_jars(self) -> str:
        """The value for ``spark.jars``."""
        return ",".join(str(jar) for jar in self.jars)

    def version_of(self, artifact: str) -> str:
        for jar in self.jars:
            parsed = parse_jar_name(jar.name)
            if parsed is not None and parsed[0] == artifact:
                return parsed[1]
        raise KeyError(artifact)


def parse_jar_name(name: str) -> tuple[str, str] | None:
    """``"kafka-clients-3.9.2.jar"`` -> ``("kafka-clients", "3.9.2")``: the version starts at the
    first ``-<digits>.<digits>`` (so ``spark-sql-kafka-0-10_2.13-4.2.0.jar`` keeps its ``0-10``)."""
    match = _JAR_NAME.match(name)
    return (match["artifact"], match["version"]) if match else None


def check_jars(jars: Iterable[Path], pyspark_jar_names: Iterable[str]) -> tuple[Path, ...]:
    """The connector's jars, sorted, after checking that each required artifact is there exactly
    once and that none is an artifact pyspark already ships (two versions of one artifact on the
    classpath: whichever loads first wins). Raises :class:`ConnectorError` otherwise."""
    shipped = {p[0] for name in pyspark_jar_names if (p := parse_jar_name(name)) is not None}
    found: dict[str, list[Path]] = {}
    for jar in sorted(jars):
        parsed = parse_jar_name(jar.name)
        if parsed is None:
            raise ConnectorError(f"cannot tell the artifact of {jar.name}")
        found.setdefault(parsed[0], []).append(jar)
    problems = [f"{a} is missing" for a in REQUIRED_ARTIFACTS if a not in found]
    problems += [f"{a} more than once: {found[a]}" for a in found if len(found[a]) > 1]
    problems += [
        f"{a} is not one of {REQUIRED_ARTIFACTS}" for a in found if a not in REQUIRED_ARTIFACTS
    ]
    problems += [f"{a} is already in pyspark's jars" for a in found if a in shipped]
    if problems:
        raise ConnectorError("connector jars unusable: " + "; ".join(problems))
    return tuple(jar for artifact in sorted(found) for jar in found[artifact])


def pyspark_jar_names() -> list[str]:
    import pyspark

    return sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def pom_spark_version(pom: Path) -> str:
    match = re.search(r"<spark\.version>([^<]+)</spark\.version>", pom.read_text())
    if match is None:
        raise ConnectorError(f"no <spark.version> in {pom}")
    return match[1].strip()


def candidate_versions(pyspark_version: str, pom_default: str) -> list[str]:
    """pyspark's own version first (a ``.dev``/``rc`` suffix dropped), then the pom's default."""
    own = re.match(r"\d+\.\d+\.\d+", pyspark_version)
    versions = [own[0]] if own else []
    return versions + [pom_default] if pom_default not in versions else versions


def _fingerprint(directory: Path, pyspark_version: str) -> str:
    digest = hashlib.sha256(f"recipe {RECIPE}\0pyspark {pyspark_version}\0".encode())
    digest.update((directory / "pom.xml").read_bytes())
    return digest.hexdigest()


def _cached(directory: Path, fingerprint: str) -> PeerConnector | None:
    try:
        stamp, version = (directory / "target" / STAMP_NAME).read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    if stamp != fingerprint:
        return None
    try:
        jars = check_jars((directory / "target" / "lib").glob("*.jar"), pyspark_jar_names())
    except ConnectorError:
        return None
    return PeerConnector(version, jars)


def _maven(mvn: str, directory: Path, version: str) -> subprocess.CompletedProcess[str] | None:
    """``mvn package`` for ``version``: offline first, then online; None once one succeeds."""
    result: subprocess.CompletedProcess[str] | None = None
    for offline in (True, False):
        shutil.rmtree(directory / "target" / "lib", ignore_errors=True)
        result = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                *(["-o"] if offline else []),
                f"-Dspark.version={version}",
                "package",
            ],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if result.returncode == 0:
            return None
    return result


def ensure_connector(directory: Path = PEER_DIR) -> PeerConnector:
    """Spark's Kafka connector jars, built by Maven unless a build for this pom exists."""
    import pyspark

    fingerprint = _fingerprint(directory, pyspark.__version__)
    cached = _cached(directory, fingerprint)
    if cached is not None:
        return cached
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConnectorError("mvn is not on PATH (Debian package maven)")
    (directory / "target").mkdir(exist_ok=True)
    with open(directory / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building right now
        cached = _cached(directory, fingerprint)
        if cached is not None:
            return cached
        failures: list[str] = []
        for version in candidate_versions(
            pyspark.__version__, pom_spark_version(directory / "pom.xml")
        ):
            print(f"fetching spark-sql-kafka-0-10_2.13 {version} with Maven", file=sys.stderr)
            failed = _maven(mvn, directory, version)
            if failed is None:
                jars = check_jars((directory / "target" / "lib").glob("*.jar"), pyspark_jar_names())
                (directory / "target" / STAMP_NAME).write_text(f"{fingerprint} {version}\n")
                return PeerConnector(version, jars)
            tail = "\n".join(failed.stdout.splitlines()[-5:])
            failures.append(f"{version}: mvn exit code {failed.returncode}:\n{tail}")
        raise ConnectorError("Maven resolved no Spark Kafka connector:\n" + "\n".join(failures))


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    try:
        connector = ensure_connector()
    except ConnectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"spark-sql-kafka {connector.spark_version}:")
    for jar in connector.jars:
        print(f"  {jar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
