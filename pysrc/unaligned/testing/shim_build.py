"""Building ``jvm-shim`` (the embedded broker's launcher, a Maven module) and finding the build.

Build: ``python -m unaligned.testing.shim_build build`` (or :func:`ensure_built`) runs
``mvn package`` when the shim has never been built or when ``pom.xml`` or a file under ``src/``
changed since the last build. The first build downloads the Kafka jars; later builds need no
network. Builds from several processes at once are serialised by a file lock. After a build, one
training start of the broker records a class-data-sharing archive (``target/broker.jsa``) that
later starts map instead of loading and verifying thousands of classes again (about 40% faster
startup). :mod:`unaligned.testing.broker_process` runs the built shim.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from unaligned.errors import EmbeddedKafkaError
from unaligned.testing.broker_config import (
    broker_properties,
    free_loopback_port,
    new_cluster_id,
    render_properties,
)
from unaligned.testing.broker_process import ShimBuild, launch_broker, require_tool
from unaligned.testing.shim_sources import (
    SHIM_DIR_ENV,
    shim_dir,
    sources_digest,
    versioned_shim_dir,
)

logger = logging.getLogger(__name__)

BUILD_STAMP_NAME = "unaligned-build.stamp"
CLASS_DATA_ARCHIVE_NAME = "broker.jsa"
BUILD_RECIPE = "2"  # bump when the build steps below change: forces a rebuild

_MAVEN_TAIL_LINES = 40


def source_fingerprint(directory: Path) -> str:
    """SHA-256 over the build recipe version, ``pom.xml`` and every file under ``src/``
    (relative names and contents)."""
    return sources_digest(directory, f"recipe {BUILD_RECIPE}\0".encode())


def _built_classpath(directory: Path) -> tuple[Path, ...]:
    target = directory / "target"
    jars = sorted(target.glob("unaligned-jvm-shim-*.jar"))
    libs = sorted((target / "lib").glob("*.jar"))
    return tuple(jars + libs)


def _current_build(directory: Path, fingerprint: str) -> ShimBuild | None:
    """The build in ``target/`` if its stamp says it was built from ``fingerprint``."""
    stamp = directory / "target" / BUILD_STAMP_NAME
    try:
        if stamp.read_text().strip() != fingerprint:
            return None
    except FileNotFoundError:
        return None
    return _read_build(directory)


def _read_build(directory: Path) -> ShimBuild | None:
    classpath = _built_classpath(directory)
    if not any(path.name.startswith("unaligned-jvm-shim-") for path in classpath):
        return None
    archive = directory / "target" / CLASS_DATA_ARCHIVE_NAME
    return ShimBuild(
        shim_dir=directory,
        classpath=classpath,
        class_data_archive=archive if archive.is_file() else None,
    )


def maven_command(mvn: str, *, offline: bool) -> list[str]:
    """``mvn package`` in batch mode, tests skipped (the shim has none); ``offline`` uses only
    the local Maven repository. Not quiet: the lines of fetched jars are the build's progress."""
    return [mvn, "-B", *(["-o"] if offline else []), "-DskipTests", "package"]


def fetched_jar(line: str) -> str | None:
    """``<name>.jar (<size>)`` for a Maven output line that reports a downloaded jar, else
    ``None`` (``Downloaded from <repository>: <url>/<name>.jar (<size> at <rate>)``)."""
    if not line.startswith("Downloaded from ") or ".jar (" not in line:
        return None
    url, _, rest = line.partition(" (")
    return f"{url.rsplit('/', 1)[-1]} ({rest.split(' at ')[0].rstrip(')')})"


def _run_maven(mvn: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """Offline first (no network once Kafka's jars are in the local repository), then online.
    Quiet unless it fails: each jar Maven fetches is logged at DEBUG, and one INFO line says how
    many it fetched; a failure's output is the caller's to show."""
    result: subprocess.CompletedProcess[str] | None = None
    fetched = 0
    for offline in (True, False):
        command = maven_command(mvn, offline=offline)
        with subprocess.Popen(
            command,
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                jar = fetched_jar(line.removeprefix("[INFO] ").strip())
                if jar is not None:
                    fetched += 1
                    logger.debug("  fetched %s", jar)
        result = subprocess.CompletedProcess(command, proc.returncode, "".join(lines))
        if result.returncode == 0:
            if fetched:
                logger.info("  Maven fetched %d jars into its local repository (once)", fetched)
            return result
        if offline:
            # expected on a first build: Kafka's jars are not in the local repository yet
            logger.debug("offline Maven build failed; retrying online (fetches missing jars)")
    assert result is not None
    return result


def ensure_built(directory: Path | None = None, kafka_version: str | None = None) -> ShimBuild:
    """Build the shim unless a build of the current ``pom.xml`` and sources exists.

    ``kafka_version``: build Apache Kafka of that version instead of the pom's, in a directory
    of its own (:func:`~unaligned.testing.shim_sources.versioned_shim_dir`). Raises
    :class:`EmbeddedKafkaError` naming the missing tool, or with the tail of Maven's output when
    the build fails.
    """
    directory = directory or shim_dir()
    if kafka_version is not None:
        directory = versioned_shim_dir(kafka_version, directory)
    if not (directory / "pom.xml").is_file():
        raise EmbeddedKafkaError(
            f"no jvm-shim Maven module at {directory} (set {SHIM_DIR_ENV} to its directory)"
        )
    fingerprint = source_fingerprint(directory)
    build = _current_build(directory, fingerprint)
    if build is not None:
        return build
    require_tool("java")
    mvn = require_tool("mvn")
    target = directory / "target"
    target.mkdir(exist_ok=True)
    with open(target / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building right now
        build = _current_build(directory, fingerprint)
        if build is not None:
            return build
        shutil.rmtree(target / "lib", ignore_errors=True)  # no stale jars from an older pom
        (target / CLASS_DATA_ARCHIVE_NAME).unlink(missing_ok=True)  # recorded for the old classpath
        logger.info(
            "building the broker's launcher with Maven in %s (once; the first build fetches "
            "Kafka's jars)",
            directory,
        )
        started = time.monotonic()
        result = _run_maven(mvn, directory)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.splitlines()[-_MAVEN_TAIL_LINES:])
            raise EmbeddedKafkaError(
                f"building jvm-shim in {directory} failed "
                f"(mvn exit code {result.returncode}):\n{tail}"
            )
        logger.info("  built in %.1f s", time.monotonic() - started)
        build = _read_build(directory)
        if build is None:
            raise EmbeddedKafkaError(
                f"mvn package in {directory} succeeded but left no shim jar in target/"
            )
        _record_class_data_archive(build, target / CLASS_DATA_ARCHIVE_NAME)
        (target / BUILD_STAMP_NAME).write_text(fingerprint + "\n")
    build = _current_build(directory, fingerprint)
    assert build is not None
    return build


def _record_class_data_archive(build: ShimBuild, archive: Path) -> None:
    """Start and stop the broker once with ``-XX:ArchiveClassesAtExit`` (a dynamic CDS archive of
    every class it loaded). Optional: on failure the broker simply starts without an archive."""
    started = time.monotonic()
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    work = Path(tempfile.mkdtemp(prefix="unaligned-cds-"))
    try:
        props = broker_properties(
            broker_port=free_loopback_port(),
            controller_port=free_loopback_port(),
            log_dir=work / "logs",
        )
        (work / "server.properties").write_text(render_properties(props))
        broker = launch_broker(
            build,
            properties_file=work / "server.properties",
            cluster_id=new_cluster_id(),
            log_file=work / "broker.log",
            extra_jvm_options=[f"-XX:ArchiveClassesAtExit={partial}"],
        )
        try:
            broker.wait_ready(120.0)
        finally:
            broker.stop(60.0)
        if not partial.is_file():
            raise EmbeddedKafkaError(f"the JVM wrote no archive; log tail:\n{broker.log_tail()}")
        os.replace(partial, archive)
        logger.info(
            "recorded class-data-sharing archive %s in %.1f s", archive, time.monotonic() - started
        )
    except (EmbeddedKafkaError, OSError) as exc:
        logger.warning(
            "no class-data-sharing archive for the embedded broker (slower starts): %s", exc
        )
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


# --- command line ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["build"]:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        try:
            build = ensure_built()
        except EmbeddedKafkaError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"jvm-shim ready: {len(build.classpath)} jars in {build.shim_dir / 'target'}")
        return 0
    print("usage: python -m unaligned.testing.shim_build build", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
