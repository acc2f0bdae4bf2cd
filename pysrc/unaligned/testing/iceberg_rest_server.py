"""A real Iceberg REST catalog for the integration tests: Apache Iceberg's own REST catalog
server (``org.apache.iceberg.rest.RESTCatalogServer``, the server of Iceberg's REST fixture
image), built by Maven from ``jvm-shim/rest-catalog``.

Iceberg publishes that server only as the ``test-fixtures`` classifier jar of
``org.apache.iceberg:iceberg-open-api``, which brings no dependencies: the module's pom lists
them (``iceberg-core`` and its ``tests`` jar, Jetty 11, SQLite JDBC) and copies them into its
``target/lib``; Hadoop's ``Configuration`` and ``HadoopFileIO``'s filesystem come from the two
``hadoop-client`` jars of pyspark's own ``jars/``. One class of ours,
``LoopbackCatalogServer``, serves Iceberg's servlet on ``127.0.0.1`` only and stops when its
standard input closes. The catalog is a ``JdbcCatalog`` on a SQLite file under the work
directory, its warehouse a local folder, so :meth:`IcebergRestServer.stop` and
:meth:`IcebergRestServer.start` again (a catalog down mid-run) keep the port and every table.
The build runs once (a stamp over the pom and sources); later starts run no Maven. Checkout
only: the wheel does not carry ``jvm-shim/rest-catalog``.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from unaligned.errors import EmbeddedCatalogError
from unaligned.testing.broker_config import free_loopback_port
from unaligned.testing.broker_process import end_server, require_tool, server_log_tail
from unaligned.testing.shim_sources import CHECKOUT_SHIM_DIR, sources_digest

MODULE_DIR = CHECKOUT_SHIM_DIR / "rest-catalog"
MAIN_CLASS = "org.apache.iceberg.rest.LoopbackCatalogServer"
STAMP_NAME = "rest-catalog.stamp"
START_TIMEOUT_S = 60.0
_HADOOP_JARS = ("hadoop-client-api-", "hadoop-client-runtime-")


def build(directory: Path = MODULE_DIR) -> list[Path]:
    """``mvn package`` in ``directory`` unless its stamp is current (offline first, then
    online); the server's classpath without Hadoop."""
    if not (directory / "pom.xml").is_file():
        raise EmbeddedCatalogError(
            f"no {directory}/pom.xml: the test REST catalog is built from a checkout"
        )
    fingerprint = sources_digest(directory, b"rest-catalog 1\0")
    stamp = directory / "target" / STAMP_NAME
    (directory / "target").mkdir(exist_ok=True)
    with open(directory / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.is_file() or stamp.read_text().strip() != fingerprint:
            mvn = require_tool("mvn")
            output = ""
            for offline in (True, False):
                done = subprocess.run(
                    [mvn, "-B", "-q", *(["-o"] if offline else []), "package"],
                    cwd=directory,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                output = done.stdout + done.stderr
                if done.returncode == 0:
                    break
            else:
                raise EmbeddedCatalogError(
                    f"Maven could not build the test REST catalog in {directory}:\n"
                    + output[-3000:]
                )
            stamp.write_text(fingerprint)
    jars = sorted((directory / "target").glob("unaligned-rest-catalog-*.jar"))
    return jars + sorted((directory / "target" / "lib").glob("*.jar"))


def hadoop_jars() -> list[Path]:
    """pyspark's ``hadoop-client-api`` and ``hadoop-client-runtime`` jars."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise EmbeddedCatalogError("the test REST catalog takes Hadoop's jars from pyspark")
    jars_dir = Path(spec.origin).parent / "jars"
    found = [j for prefix in _HADOOP_JARS for j in sorted(jars_dir.glob(f"{prefix}*.jar"))]
    if len(found) != len(_HADOOP_JARS):
        raise EmbeddedCatalogError(f"no hadoop-client-api/-runtime jars in {jars_dir}")
    return found


class IcebergRestServer:
    """One REST catalog JVM on a loopback port, its catalog and warehouse in ``work_dir``;
    a context manager. :meth:`stop` then :meth:`start` keep the port and the tables."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.classpath = [*build(), *hadoop_jars()]
        self.java = require_tool("java")
        self.port = free_loopback_port()
        self.warehouse = work_dir / "warehouse"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "rest-catalog.log"

    def options(self) -> dict[str, str]:
        """The Iceberg sink's options that reach this catalog."""
        return {"catalog.type": "rest", "catalog.uri": self.uri}

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the JVM and wait until ``/v1/config`` answers."""
        if self._process is not None and self._process.poll() is None:
            return
        self.warehouse.mkdir(parents=True, exist_ok=True)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")},
            "CATALOG_REST_PORT": str(self.port),
            "CATALOG_URI": f"jdbc:sqlite:file:{self.work_dir / 'catalog.db'}",
            "CATALOG_WAREHOUSE": f"file://{self.warehouse}",
        }
        command = [
            self.java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            os.pathsep.join(str(j) for j in self.classpath),
            MAIN_CLASS,
        ]
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedCatalogError(
                    f"the test REST catalog exited with {self._process.returncode}; log:\n"
                    + self.log_tail()
                )
            try:
                urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise EmbeddedCatalogError(
            f"the test REST catalog did not answer within {timeout_s:.0f} s; log:\n"
            + self.log_tail()
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Close its standard input (it stops), killed if it does not within ``timeout_s``."""
        process, self._process = self._process, None
        end_server(process, timeout_s, by_closing_stdin=True)

    def log_tail(self, lines: int = 40) -> str:
        return server_log_tail(self.log_file, lines)

    def __enter__(self) -> IcebergRestServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
