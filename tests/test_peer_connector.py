"""benchmarks.peer_connector without Maven: reading jar names, and which jars it accepts next to
pyspark's (the benchmark's copy of Spark's Kafka connector must not bring a second scala or
slf4j)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import peer_connector as pc

CONNECTOR = [
    "commons-pool2-2.13.1.jar",
    "kafka-clients-3.9.2.jar",
    "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
]
PYSPARK = ["scala-library-2.13.18.jar", "slf4j-api-2.0.17.jar", "spark-tags_2.13-4.3.0.jar"]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("kafka-clients-3.9.2.jar", ("kafka-clients", "3.9.2")),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", ("spark-sql-kafka-0-10_2.13", "4.2.0")),
        (
            "spark-sql-kafka-0-10_2.13-4.2.0-preview5.jar",
            ("spark-sql-kafka-0-10_2.13", "4.2.0-preview5"),
        ),
        ("zstd-jni-1.5.7-7.jar", ("zstd-jni", "1.5.7-7")),
        ("json4s-jackson_2.13-4.0.7.jar", ("json4s-jackson_2.13", "4.0.7")),
        ("no-version.jar", None),
    ],
)
def test_parse_jar_name(name: str, parsed: tuple[str, str] | None) -> None:
    assert pc.parse_jar_name(name) == parsed


def test_check_jars_accepts_the_four_artifacts_sorted() -> None:
    jars = [Path("/lib") / name for name in reversed(CONNECTOR)]
    assert [j.name for j in pc.check_jars(jars, PYSPARK)] == CONNECTOR


@pytest.mark.parametrize(
    ("jars", "problem"),
    [
        (CONNECTOR + ["scala-library-2.13.15.jar"], "scala-library is not one of"),
        (CONNECTOR[:1] + CONNECTOR[2:], "kafka-clients is missing"),
        (CONNECTOR + ["kafka-clients-4.0.0.jar"], "kafka-clients more than once"),
        (CONNECTOR + ["README"], "cannot tell the artifact of README"),
    ],
)
def test_check_jars_rejects(jars: list[str], problem: str) -> None:
    with pytest.raises(pc.ConnectorError, match=re.escape(problem)):
        pc.check_jars([Path(name) for name in jars], PYSPARK)


def test_check_jars_rejects_an_artifact_pyspark_already_ships() -> None:
    with pytest.raises(pc.ConnectorError, match="commons-pool2 is already in pyspark's jars"):
        pc.check_jars([Path(name) for name in CONNECTOR], [*PYSPARK, "commons-pool2-2.12.0.jar"])


def test_the_installed_pyspark_ships_none_of_the_connector_artifacts() -> None:
    shipped = {p[0] for name in pc.pyspark_jar_names() if (p := pc.parse_jar_name(name))}
    assert shipped, "found no jars in pyspark's jars/"
    assert shipped.isdisjoint(pc.REQUIRED_ARTIFACTS)


def test_the_pom_copies_exactly_the_required_artifacts() -> None:
    pom = (pc.PEER_DIR / "pom.xml").read_text()
    match = re.search(r"<includeArtifactIds>([^<]+)</includeArtifactIds>", pom)
    assert match is not None
    assert sorted(match[1].split(",")) == sorted(pc.REQUIRED_ARTIFACTS)
    assert re.fullmatch(r"4\.\d+\.\d+", pc.pom_spark_version(pc.PEER_DIR / "pom.xml"))


@pytest.mark.parametrize(
    ("pyspark_version", "versions"),
    [
        ("4.3.0", ["4.3.0", "4.2.0"]),
        ("4.2.0", ["4.2.0"]),
        ("4.3.0.dev1", ["4.3.0", "4.2.0"]),
        ("weird", ["4.2.0"]),
    ],
)
def test_candidate_versions(pyspark_version: str, versions: list[str]) -> None:
    assert pc.candidate_versions(pyspark_version, "4.2.0") == versions
