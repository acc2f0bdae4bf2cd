"""A real Iceberg REST catalog for tests: Apache Iceberg's own REST catalog test fixture.

Apache Iceberg publishes the server its REST catalog tests run against (the one in the
``apache/iceberg-rest-fixture`` image) to Maven Central as
``org.apache.iceberg:iceberg-open-api-test-fixtures-runtime`` (a runnable jar of
``org.apache.iceberg.rest.RESTCatalogServer``, built from ``iceberg-open-api``'s
``test-fixtures``). Maven fetches it once into the local repository. The server keeps its
catalog in an in-memory SQLite JDBC catalog and writes table metadata under the warehouse given
to it (``CATALOG_WAREHOUSE``; ``CATALOG_<PROPERTY>`` environment variables become catalog
properties, ``REST_PORT`` its port). It listens on a loopback port and dies with the process
that started it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from unaligned.errors import EmbeddedCatalogError
from unaligned.testing.broker_config import free_loopback_port
from unaligned.testing.broker_process import require_tool

VERSION = "1.10.0"
ARTIFACT = f"org.apache.iceberg:iceberg-open-api-test-fixtures-runtime:{VERSION}"
START_TIMEOUT_S = 120.0


def fixture_jar() -> Path:
    """The runnable REST catalog fixture jar, fetched by Maven once."""
    jar = (
        Path.home()
        / ".m2/repository/org/apache/iceberg/iceberg-open-api-test-fixtures-runtime"
        / VERSION
        / f"iceberg-open-api-test-fixtures-runtime-{VERSION}.jar"
    )
    if jar.exists():
        return jar
    mvn = require_tool("mvn")
    done = subprocess.run(
        [mvn, "-q", "-B", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0 or not jar.exists():
        raise EmbeddedCatalogError(
            f"Maven could not fetch {ARTIFACT}: {(done.stdout + done.stderr)[-2000:]}"
        )
    return jar


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class IcebergRestServer:
    """One REST catalog JVM on a loopback port, its warehouse in ``work_dir``; a context
    manager."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.jar = fixture_jar()
        self.port = free_loopback_port()
        self.warehouse = work_dir / "warehouse"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "rest-catalog.log"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.warehouse.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "REST_PORT": str(self.port),
            "CATALOG_WAREHOUSE": f"file://{self.warehouse}",
        }
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-jar", str(self.jar)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                env=env,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedCatalogError(
                    f"the REST catalog exited with {self._process.returncode}: {self._tail()}"
                )
            try:
                urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2).close()
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        self.stop()
        raise EmbeddedCatalogError(f"the REST catalog did not answer in {timeout_s:.0f} s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)

    def _tail(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> IcebergRestServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
