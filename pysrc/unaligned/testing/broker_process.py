"""One embedded Kafka node's JVM process: the ``java`` command line, the stdin/stdout command
channel to the running ``EmbeddedBroker``, and the signals a test sends it (stop, kill, freeze).

The shim (``jvm-shim/``, built by :mod:`unaligned.testing.shim_build`) holds one launcher class,
``dev.unaligned.shim.EmbeddedBroker``, that runs one KRaft Kafka node (broker and controller in
one process; its properties come from :mod:`unaligned.testing.broker_config`) and answers a few
admin commands on stdin that kafka-python cannot send (default client quotas).

Launch protocol (stdout of the java process, one line each, every line starts with
``UNALIGNED-SHIM``):

Command line: ``EmbeddedBroker <server.properties> <cluster id> [format arguments...]``; the
format arguments go to the log directory's format step (``--add-scram`` creates SCRAM users).

1. ``UNALIGNED-SHIM READY <host:port>`` once the broker answers metadata requests.
2. For every command line written to stdin, one ``UNALIGNED-SHIM OK <text>`` or
   ``UNALIGNED-SHIM ERROR <text>`` line.
3. The server stops when stdin closes (so a parent that dies never leaves a broker behind),
   on the ``STOP`` command, or on SIGTERM: a controlled shutdown, which hands the node's
   partition leaderships to other nodes first. Logs (WARN and above) go to stderr, which
   :func:`launch_broker` sends to a file.

Faults: :meth:`BrokerProcess.kill` (SIGKILL: a lost host, no controlled shutdown),
:meth:`BrokerProcess.freeze` / :meth:`BrokerProcess.thaw` (SIGSTOP / SIGCONT: a hung JVM, a long
garbage collection, a host cut off; its connections stay open and unanswered).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from unaligned.errors import EmbeddedKafkaError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShimBuild:
    """A built shim: its jar plus every runtime dependency jar (the launch classpath), and the
    class-data-sharing archive recorded for this classpath, if there is one."""

    shim_dir: Path
    classpath: tuple[Path, ...]
    class_data_archive: Path | None = None

    def classpath_arg(self) -> str:
        return os.pathsep.join(str(path) for path in self.classpath)


BROKER_MAIN_CLASS = "dev.unaligned.shim.EmbeddedBroker"
PROTOCOL_PREFIX = "UNALIGNED-SHIM "

DEFAULT_HEAP = "1g"
JVM_OPTIONS: tuple[str, ...] = (
    "-XX:+UseSerialGC",  # two cores: no parallel GC threads competing with Spark
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dlog4j2.shutdownHookEnabled=false",
)

_LOG_TAIL_LINES = 40


def require_tool(name: str) -> str:
    """The path of ``name`` (``java`` or ``mvn``) on PATH; raises :class:`EmbeddedKafkaError`
    naming the missing tool."""
    path = shutil.which(name)
    if path is None:
        raise EmbeddedKafkaError(
            f"`{name}` was not found on PATH; the embedded Kafka broker needs a JDK 17+ (`java`) "
            "and Maven (`mvn`) to build and run jvm-shim (./dev installs both)"
        )
    return path


def end_server(
    process: subprocess.Popen[bytes] | None, timeout_s: float, *, by_closing_stdin: bool = False
) -> None:
    """Stop a test server the kit started (SIGTERM, or its standard input closed where that is
    how it stops); killed if it does not within ``timeout_s``. ``None`` or an ended one: nothing."""
    if process is None or process.poll() is not None:
        return
    if by_closing_stdin:
        assert process.stdin is not None
        process.stdin.close()
    else:
        process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)


def server_log_tail(log_file: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a test server's log, for an error message."""
    try:
        return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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
    java = require_tool("java")
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

    def kill(self) -> int:
        """SIGKILL the JVM (no controlled shutdown) and wait for it; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.kill()
        return self.stop()

    def freeze(self) -> None:
        """SIGSTOP the JVM: it keeps its sockets open and answers nothing until :meth:`thaw`."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen JVM."""
        self._signal(signal.SIGCONT)

    def _signal(self, signum: signal.Signals) -> None:
        if self.popen.poll() is not None:
            raise EmbeddedKafkaError(f"embedded broker (pid {self.pid}) is not running")
        os.kill(self.pid, signum)

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop the broker: SIGTERM (a controlled shutdown), then SIGKILL after ``timeout_s``.
        A frozen JVM is thawed first.

        Returns the exit code. Safe to call more than once.
        """
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
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
    extra_jvm_options: Sequence[str] = (),
    format_arguments: Sequence[str] = (),
) -> BrokerProcess:
    """Start ``EmbeddedBroker`` with ``properties_file``; stderr (the broker log) goes to
    ``log_file``. ``format_arguments``: more arguments of the log directory's format step
    (``--add-scram ...``). The caller waits with :meth:`BrokerProcess.wait_ready`."""
    command = java_command(
        build,
        BROKER_MAIN_CLASS,
        [str(properties_file), cluster_id, *format_arguments],
        heap=heap,
        extra_options=extra_jvm_options,
    )
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
