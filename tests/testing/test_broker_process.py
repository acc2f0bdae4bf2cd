"""unaligned.testing.broker_process without a broker: the java command, the stdout protocol, the
signals."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from unaligned.errors import EmbeddedKafkaError
from unaligned.testing import broker_process
from unaligned.testing.broker_process import ShimBuild


def test_java_command_runs_the_main_class_with_a_bounded_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(java.parent))
    build = ShimBuild(shim_dir=tmp_path, classpath=(tmp_path / "a.jar", tmp_path / "b.jar"))
    command = broker_process.java_command(
        build, broker_process.BROKER_MAIN_CLASS, ["server.properties", "id"]
    )
    assert command[0] == str(tmp_path / "bin" / "java")
    assert "-Xmx1g" in command
    cp = command[command.index("-cp") + 1]
    assert cp == f"{tmp_path / 'a.jar'}{os.pathsep}{tmp_path / 'b.jar'}"
    assert command[-3:] == [broker_process.BROKER_MAIN_CLASS, "server.properties", "id"]


# --- the stdout/stdin protocol, with a stand-in process -------------------------------------------

FAKE_BROKER = textwrap.dedent(
    """
    import sys
    print("some library chatter")
    print("UNALIGNED-SHIM READY 127.0.0.1:9999", flush=True)
    for line in sys.stdin:
        word = line.split()[0]
        if word == "PING":
            print("UNALIGNED-SHIM OK PONG", flush=True)
        else:
            print("UNALIGNED-SHIM ERROR unknown command: " + word, flush=True)
    """
)


def _process(tmp_path: Path, script: str) -> broker_process.BrokerProcess:
    log = tmp_path / "broker.log"
    with open(log, "ab") as log_handle:
        popen = subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_handle,
            text=True,
            bufsize=1,
        )
    return broker_process.BrokerProcess(popen, log)


def test_protocol_ready_command_and_error(tmp_path: Path) -> None:
    process = _process(tmp_path, FAKE_BROKER)
    try:
        assert process.wait_ready(10) == "127.0.0.1:9999"
        assert process.command("PING", 10) == "PONG"
        with pytest.raises(EmbeddedKafkaError, match="unknown command: NOPE"):
            process.command("NOPE", 10)
    finally:
        process.stop(10)
    assert process.popen.poll() is not None


def test_closing_stdin_ends_the_process(tmp_path: Path) -> None:
    process = _process(tmp_path, FAKE_BROKER)
    process.wait_ready(10)
    assert process.popen.stdin is not None
    process.popen.stdin.close()
    assert process.popen.wait(timeout=10) == 0


def test_exit_before_ready_reports_the_log_tail(tmp_path: Path) -> None:
    process = _process(
        tmp_path, "import sys; sys.stderr.write('Address already in use\\n'); sys.exit(7)"
    )
    with pytest.raises(EmbeddedKafkaError, match=r"(?s)exited with code 7.*Address already in use"):
        process.wait_ready(10)
    process.stop(5)


def test_silence_before_ready_is_bounded(tmp_path: Path) -> None:
    process = _process(tmp_path, "import time; time.sleep(30)")
    try:
        with pytest.raises(EmbeddedKafkaError, match="no answer to the READY line"):
            process.wait_ready(0.5)
    finally:
        process.stop(5)


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('UNALIGNED-SHIM READY 127.0.0.1:1', flush=True)\n"
        "time.sleep(60)\n"
    )
    process = _process(tmp_path, script)
    process.wait_ready(10)
    assert process.stop(timeout_s=0.5) == -9


def test_launch_broker_passes_the_properties_file_cluster_id_and_extra_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake java that answers READY with its own command line.
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\necho "UNALIGNED-SHIM READY $*"\n')
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(java.parent))
    build = ShimBuild(shim_dir=tmp_path, classpath=(tmp_path / "a.jar",))

    process = broker_process.launch_broker(
        build,
        properties_file=tmp_path / "server.properties",
        cluster_id="cluster",
        log_file=tmp_path / "broker.log",
        heap="256m",
        extra_jvm_options=["-XX:ArchiveClassesAtExit=x.jsa"],
    )
    try:
        args = process.wait_ready(10).split()
    finally:
        process.stop(5)

    assert "-Xmx256m" in args and "-XX:ArchiveClassesAtExit=x.jsa" in args
    assert args[-3:] == [
        broker_process.BROKER_MAIN_CLASS,
        str(tmp_path / "server.properties"),
        "cluster",
    ]
