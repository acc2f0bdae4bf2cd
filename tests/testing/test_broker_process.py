"""unaligned.testing.broker_process without a broker: properties, ids, the java command, the
stdout protocol."""

from __future__ import annotations

import base64
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

# --- broker properties ---------------------------------------------------------------------------


def test_broker_properties_listen_on_loopback_with_single_node_replication(tmp_path: Path) -> None:
    props = broker_process.broker_properties(
        broker_port=1234, controller_port=1235, log_dir=tmp_path / "logs"
    )

    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:1234,CONTROLLER://127.0.0.1:1235"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:1234"
    assert props["controller.quorum.voters"] == f"{props['node.id']}@127.0.0.1:1235"
    assert props["log.dirs"] == str(tmp_path / "logs")
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "min.insync.replicas",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"


def test_every_listener_address_is_loopback(tmp_path: Path) -> None:
    props = broker_process.broker_properties(broker_port=1, controller_port=2, log_dir=tmp_path)
    addresses = props["listeners"].split(",") + props["advertised.listeners"].split(",")
    for address in addresses:
        host = address.split("://", 1)[1].rsplit(":", 1)[0]
        assert host == "127.0.0.1", address


def test_overrides_win_and_are_stringified(tmp_path: Path) -> None:
    props = broker_process.broker_properties(
        broker_port=1,
        controller_port=2,
        log_dir=tmp_path,
        overrides={"transaction.max.timeout.ms": 60000, "auto.create.topics.enable": "true"},  # type: ignore[dict-item]
    )
    assert props["transaction.max.timeout.ms"] == "60000"
    assert props["auto.create.topics.enable"] == "true"


def test_render_properties_escapes_what_java_properties_would_misread() -> None:
    text = broker_process.render_properties(
        {
            "log.dirs": "/tmp/a b",
            "odd key:x=y": " lead",
            "path": "C:\\dir",
            "uni": "é",
            "plain": "v",
        }
    )
    lines = text.splitlines()
    assert "log.dirs=/tmp/a b" in lines
    assert "odd\\ key\\:x\\=y=\\ lead" in lines
    assert "path=C\\:\\\\dir" in lines
    assert "uni=\\u00e9" in lines
    assert "plain=v" in lines
    assert text.endswith("\n")


def test_new_cluster_id_is_a_kafka_uuid_string() -> None:
    ids = {broker_process.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_free_loopback_port_is_bindable_on_loopback() -> None:
    import socket

    port = broker_process.free_loopback_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert sock.getsockname() == ("127.0.0.1", port)


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
