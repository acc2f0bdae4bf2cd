"""The only module that touches the JVM: builds ``jvm-shim`` with Maven and launches ``java``.

The shim (``jvm-shim/``, a Maven module) holds one launcher class,
``dev.unaligned.shim.EmbeddedBroker``, that runs a single-node KRaft Kafka server (broker and
controller in one process) and answers a few admin commands on stdin that kafka-python cannot
send (default client quotas).

Build: ``python -m unaligned.testing.jvm build`` (or :func:`ensure_built`) runs ``mvn package`` when the
shim has never been built or when ``pom.xml`` or a file under ``src/`` changed since the last
build. The first build downloads the Kafka jars; later builds need no network. Builds from
several processes at once are serialised by a file lock. After a build, one training start of
the broker records a class-data-sharing archive (``target/broker.jsa``) that later starts map
instead of loading and verifying thousands of classes again (about 40% faster startup).

Launch protocol (stdout of the java process, one line each, every line starts with
``UNALIGNED-SHIM``):

1. ``UNALIGNED-SHIM READY <host:port>`` once the broker answers metadata requests.
2. For every command line written to stdin, one ``UNALIGNED-SHIM OK <text>`` or
   ``UNALIGNED-SHIM ERROR <text>`` line.
3. The server stops when stdin closes (so a parent that dies never leaves a broker behind),
   on the ``STOP`` command, or on SIGTERM. Logs (WARN and above) go to stderr, which
   :func:`launch_broker` sends to a file.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from unaligned.errors import EmbeddedKafkaError

logger = logging.getLogger(__name__)

SHIM_DIR_ENV = "UNALIGNED_JVM_SHIM_DIR"
"""Environment variable naming the ``jvm-shim`` directory (default: found from this package)."""

BROKER_MAIN_CLASS = "dev.unaligned.shim.EmbeddedBroker"
PROTOCOL_PREFIX = "UNALIGNED-SHIM "
BUILD_STAMP_NAME = "unaligned-build.stamp"
CLASS_DATA_ARCHIVE_NAME = "broker.jsa"
BUILD_RECIPE = "2"  # bump when the build steps below change: forces a rebuild

DEFAULT_HEAP = "1g"
JVM_OPTIONS: tuple[str, ...] = (
    "-XX:+UseSerialGC",  # two cores: no parallel GC threads competing with Spark
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dlog4j2.shutdownHookEnabled=false",
)

_MAVEN_TAIL_LINES = 40
_LOG_TAIL_LINES = 40


# --- build -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShimBuild:
    """A built shim: its jar plus every runtime dependency jar (the launch classpath), and the
    class-data-sharing archive recorded for this classpath, if there is one."""

    shim_dir: Path
    classpath: tuple[Path, ...]
    class_data_archive: Path | None = None

    def classpath_arg(self) -> str:
        return os.pathsep.join(str(path) for path in self.classpath)


def shim_dir() -> Path:
    """The ``jvm-shim`` directory: ``$UNALIGNED_JVM_SHIM_DIR``, else ``<repo>/jvm-shim`` found
    from this package's location (``pysrc/unaligned/testing`` -> ``../../../jvm-shim``)."""
    override = os.environ.get(SHIM_DIR_ENV)
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[3] / "jvm-shim"


def source_fingerprint(directory: Path) -> str:
    """SHA-256 over the build recipe version, ``pom.xml`` and every file under ``src/``
    (relative names and contents)."""
    digest = hashlib.sha256(f"recipe {BUILD_RECIPE}\0".encode())
    files = [directory / "pom.xml"]
    src = directory / "src"
    if src.is_dir():
        files.extend(sorted(path for path in src.rglob("*") if path.is_file()))
    for path in files:
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


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


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise EmbeddedKafkaError(
            f"`{name}` was not found on PATH; the embedded Kafka broker needs a JDK 17+ (`java`) "
            "and Maven (`mvn`) to build and run jvm-shim (./dev installs both)"
        )
    return path


def maven_command(mvn: str, *, offline: bool) -> list[str]:
    """``mvn package`` in batch mode, quiet, tests skipped (the shim has none); ``offline`` uses
    only the local Maven repository."""
    return [mvn, "-B", "-q", *(["-o"] if offline else []), "-DskipTests", "package"]


def _run_maven(mvn: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """Offline first (no network once Kafka's jars are in the local repository), then online."""
    result: subprocess.CompletedProcess[str] | None = None
    for offline in (True, False):
        result = subprocess.run(
            maven_command(mvn, offline=offline),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if result.returncode == 0:
            return result
        if offline:
            logger.info("offline Maven build failed; retrying online (downloads missing jars)")
    assert result is not None
    return result


def ensure_built(directory: Path | None = None) -> ShimBuild:
    """Build the shim unless a build of the current ``pom.xml`` and sources exists.

    Raises :class:`EmbeddedKafkaError` naming the missing tool, or with the tail of Maven's
    output when the build fails.
    """
    directory = directory or shim_dir()
    if not (directory / "pom.xml").is_file():
        raise EmbeddedKafkaError(
            f"no jvm-shim Maven module at {directory} (set {SHIM_DIR_ENV} to its directory)"
        )
    fingerprint = source_fingerprint(directory)
    build = _current_build(directory, fingerprint)
    if build is not None:
        return build
    _require_tool("java")
    mvn = _require_tool("mvn")
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
            "building jvm-shim in %s (Maven fetches Kafka's jars if they are not cached yet)",
            directory,
        )
        started = time.monotonic()
        result = _run_maven(mvn, directory)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.splitlines()[-_MAVEN_TAIL_LINES:])
            raise EmbeddedKafkaError(
                f"building jvm-shim in {directory} failed (mvn exit code {result.returncode}):\n{tail}"
            )
        logger.info("built jvm-shim in %.1f s", time.monotonic() - started)
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
        command = java_command(
            build,
            BROKER_MAIN_CLASS,
            [str(work / "server.properties"), new_cluster_id()],
            extra_options=[f"-XX:ArchiveClassesAtExit={partial}"],
        )
        broker = _start(command, work / "broker.log")
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


# --- broker configuration ------------------------------------------------------------------------


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka refuses ids that look like command-line flags
            return text


def broker_properties(
    *,
    broker_port: int,
    controller_port: int,
    log_dir: Path,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Server properties of one single-node KRaft server (node id 1) on loopback only.

    Every replication setting is 1 so that transactions and consumer groups work on one node;
    internal topics get few partitions for a quick start; client quotas act within about a
    second. ``overrides`` win over the defaults.
    """
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        # Quotas (throttle_producers) measure rates over 2 one-second samples instead of 11, so
        # a new quota throttles after about one second's worth of bytes, not ten.
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    }
    if overrides:
        props.update({str(key): str(value) for key, value in overrides.items()})
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """Java ``.properties`` text; keys and values are escaped so ``Properties.load`` reads them back."""

    def escape(text: str, *, key: bool) -> str:
        out = []
        for index, char in enumerate(text):
            if char == "\\":
                out.append("\\\\")
            elif char == "\n":
                out.append("\\n")
            elif char == "\r":
                out.append("\\r")
            elif char == "\t":
                out.append("\\t")
            elif char in "=:#!" or (char == " " and (key or index == 0)):
                out.append("\\" + char)
            elif ord(char) > 0x7E or ord(char) < 0x20:
                out.append(f"\\u{ord(char):04x}")
            else:
                out.append(char)
        return "".join(out)

    return "".join(f"{escape(k, key=True)}={escape(v, key=False)}\n" for k, v in props.items())


def java_command(
    build: ShimBuild,
    main_class: str,
    args: Sequence[str],
    *,
    heap: str = DEFAULT_HEAP,
    extra_options: Sequence[str] = (),
) -> list[str]:
    """The ``java`` command line that runs ``main_class`` on the shim's classpath (with the
    build's class-data-sharing archive when it has one)."""
    java = _require_tool("java")
    options = [f"-Xmx{heap}", *JVM_OPTIONS]
    if build.class_data_archive is not None:
        options.append(f"-XX:SharedArchiveFile={build.class_data_archive}")
    options.extend(extra_options)
    return [java, *options, "-cp", build.classpath_arg(), main_class, *args]


# --- the broker process --------------------------------------------------------------------------


class BrokerProcess:
    """A running ``EmbeddedBroker`` JVM and the stdin/stdout command channel to it.

    Made by :func:`launch_broker`. :meth:`wait_ready` must return before :meth:`command`.
    """

    def __init__(self, popen: subprocess.Popen[str], log_file: Path) -> None:
        self.popen = popen
        self.log_file = log_file
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._command_lock = threading.Lock()
        self._reader = threading.Thread(
            target=self._read_stdout, name=f"embedded-kafka-stdout-{popen.pid}", daemon=True
        )
        self._reader.start()

    def _read_stdout(self) -> None:
        stdout = self.popen.stdout
        assert stdout is not None
        for line in stdout:
            line = line.rstrip("\n")
            if line.startswith(PROTOCOL_PREFIX):
                self._lines.put(line[len(PROTOCOL_PREFIX) :])
            elif line:
                logger.debug("embedded broker stdout: %s", line)
        self._lines.put(None)  # end of stream: the process is gone

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:]) or "(broker log is empty)"

    def _next_line(self, deadline: float, waiting_for: str) -> str:
        remaining = deadline - time.monotonic()
        try:
            line = self._lines.get(timeout=max(remaining, 0.0))
        except queue.Empty:
            raise EmbeddedKafkaError(
                f"embedded broker (pid {self.pid}) gave no answer to {waiting_for} within the time "
                f"limit; log tail of {self.log_file}:\n{self.log_tail()}"
            ) from None
        if line is None:
            self._lines.put(None)  # keep reporting the end for later callers
            code = self.popen.wait()
            raise EmbeddedKafkaError(
                f"embedded broker (pid {self.pid}) exited with code {code} while waiting for "
                f"{waiting_for}; log tail of {self.log_file}:\n{self.log_tail()}"
            )
        return line

    def wait_ready(self, timeout_s: float) -> str:
        """Block until the READY line; return the broker's ``host:port``."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._next_line(deadline, "the READY line")
            if line.startswith("READY "):
                return line[len("READY ") :].strip()
            logger.debug("embedded broker said before READY: %s", line)

    def command(self, line: str, timeout_s: float = 60.0) -> str:
        """Send one command line; return the text after ``OK``, raise on ``ERROR``."""
        with self._command_lock:
            stdin = self.popen.stdin
            if stdin is None or self.popen.poll() is not None:
                raise EmbeddedKafkaError(f"embedded broker (pid {self.pid}) is not running")
            try:
                stdin.write(line + "\n")
                stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise EmbeddedKafkaError(
                    f"embedded broker (pid {self.pid}) closed its command channel: {exc}"
                ) from exc
            answer = self._next_line(time.monotonic() + timeout_s, f"command {line!r}")
        status, _, text = answer.partition(" ")
        if status == "OK":
            return text
        raise EmbeddedKafkaError(f"embedded broker refused command {line!r}: {text}")

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop the broker: SIGTERM (a clean shutdown), then SIGKILL after ``timeout_s``.

        Returns the exit code. Safe to call more than once.
        """
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "embedded broker (pid %d) did not stop within %.0f s of SIGTERM; killing it",
                    self.pid,
                    timeout_s,
                )
                self.popen.kill()
                self.popen.wait()
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._reader.join(timeout=5)
        return int(self.popen.returncode)


def launch_broker(
    build: ShimBuild,
    *,
    properties_file: Path,
    cluster_id: str,
    log_file: Path,
    heap: str = DEFAULT_HEAP,
) -> BrokerProcess:
    """Start ``EmbeddedBroker`` with ``properties_file``; stderr (the broker log) goes to
    ``log_file``. The caller waits with :meth:`BrokerProcess.wait_ready`."""
    command = java_command(build, BROKER_MAIN_CLASS, [str(properties_file), cluster_id], heap=heap)
    return _start(command, log_file)


def _start(command: Sequence[str], log_file: Path) -> BrokerProcess:
    logger.debug("launching embedded broker: %s", " ".join(command))
    log: IO[bytes]
    with open(log_file, "ab") as log:
        popen = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
            start_new_session=True,  # a terminal's Ctrl-C reaches the parent, which stops us
        )
    return BrokerProcess(popen, log_file)


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
    print("usage: python -m unaligned.testing.jvm build", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
