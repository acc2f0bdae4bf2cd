"""unaligned.testing.jvm without a broker: properties, ids, build decisions, the stdout protocol."""

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
from unaligned.testing import jvm

# --- broker properties ---------------------------------------------------------------------------


def test_broker_properties_listen_on_loopback_with_single_node_replication(tmp_path: Path) -> None:
    props = jvm.broker_properties(broker_port=1234, controller_port=1235, log_dir=tmp_path / "logs")

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
    props = jvm.broker_properties(broker_port=1, controller_port=2, log_dir=tmp_path)
    addresses = props["listeners"].split(",") + props["advertised.listeners"].split(",")
    for address in addresses:
        host = address.split("://", 1)[1].rsplit(":", 1)[0]
        assert host == "127.0.0.1", address


def test_overrides_win_and_are_stringified(tmp_path: Path) -> None:
    props = jvm.broker_properties(
        broker_port=1,
        controller_port=2,
        log_dir=tmp_path,
        overrides={"transaction.max.timeout.ms": 60000, "auto.create.topics.enable": "true"},  # type: ignore[dict-item]
    )
    assert props["transaction.max.timeout.ms"] == "60000"
    assert props["auto.create.topics.enable"] == "true"


def test_render_properties_escapes_what_java_properties_would_misread() -> None:
    text = jvm.render_properties(
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
    ids = {jvm.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_free_loopback_port_is_bindable_on_loopback() -> None:
    import socket

    port = jvm.free_loopback_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert sock.getsockname() == ("127.0.0.1", port)


# --- locating and building the shim -----------------------------------------------------------------


def test_shim_dir_defaults_to_the_repository_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jvm.SHIM_DIR_ENV, raising=False)
    assert (jvm.shim_dir() / "pom.xml").is_file()
    assert jvm.shim_dir().name == "jvm-shim"


def test_shim_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(jvm.SHIM_DIR_ENV, str(tmp_path))
    assert jvm.shim_dir() == tmp_path.resolve()


def _fake_shim(tmp_path: Path) -> Path:
    shim = tmp_path / "shim"
    (shim / "src" / "main" / "java").mkdir(parents=True)
    (shim / "pom.xml").write_text("<project/>")
    (shim / "src" / "main" / "java" / "A.java").write_text("class A {}")
    return shim


def test_fingerprint_follows_pom_and_sources_but_not_target(tmp_path: Path) -> None:
    shim = _fake_shim(tmp_path)
    first = jvm.source_fingerprint(shim)
    (shim / "target").mkdir()
    (shim / "target" / "x.class").write_text("built")
    assert jvm.source_fingerprint(shim) == first
    (shim / "src" / "main" / "java" / "A.java").write_text("class A { int x; }")
    second = jvm.source_fingerprint(shim)
    assert second != first
    (shim / "pom.xml").write_text("<project></project>")
    assert jvm.source_fingerprint(shim) != second


def _tool_dir(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A directory with fake executables; ``tools`` maps a name to a shell script body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


# PATH holds only the fake tools, so the fake Maven uses no other command.
FAKE_MVN_OK = (
    f'exec "{sys.executable}" -c "'
    "import pathlib; t = pathlib.Path('target'); (t / 'lib').mkdir(parents=True, exist_ok=True); "
    "[(t / n).touch() for n in ('unaligned-jvm-shim-0.1.0.jar', 'lib/b.jar', 'lib/a.jar')]; "
    "f = open('../mvn-calls', 'a'); f.write('run\\n')"
    '"\n'
)


def test_ensure_built_builds_once_then_reuses_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": FAKE_MVN_OK})))

    build = jvm.ensure_built(shim)
    again = jvm.ensure_built(shim)

    assert [p.name for p in build.classpath] == ["unaligned-jvm-shim-0.1.0.jar", "a.jar", "b.jar"]
    assert again == build
    assert (tmp_path / "mvn-calls").read_text().count("run") == 1  # offline build succeeded
    assert build.classpath_arg().split(os.pathsep)[0].endswith("unaligned-jvm-shim-0.1.0.jar")


def test_ensure_built_rebuilds_after_a_source_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": FAKE_MVN_OK})))
    jvm.ensure_built(shim)
    (shim / "src" / "main" / "java" / "A.java").write_text("class A { void changed() {} }")
    jvm.ensure_built(shim)
    assert (tmp_path / "mvn-calls").read_text().count("run") == 2


def test_ensure_built_reports_the_tail_of_a_failed_maven_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    failing = 'i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; echo "[ERROR] boom"; exit 3\n'
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": failing})))

    with pytest.raises(EmbeddedKafkaError) as raised:
        jvm.ensure_built(shim)

    message = str(raised.value)
    assert "exit code 3" in message and str(shim) in message
    assert "[ERROR] boom" in message and "line 99" in message
    assert "line 5\n" not in message  # only the tail
    assert not (shim / "target" / jvm.BUILD_STAMP_NAME).exists()


def test_maven_runs_offline_first_then_online(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    # Fails when offline (-o), builds when online; records its arguments.
    mvn = (
        'echo "$@" >> ../mvn-args\ncase "$*" in *-o*) echo "[ERROR] offline: artifact missing"; exit 1;; esac\n'
        + FAKE_MVN_OK
    )
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0", "mvn": mvn})))

    jvm.ensure_built(shim)

    calls = (tmp_path / "mvn-args").read_text().splitlines()
    assert len(calls) == 2
    assert "-o" in calls[0].split() and "-o" not in calls[1].split()
    assert calls[1].split()[-1] == "package"


@pytest.mark.parametrize("missing", ["java", "mvn"])
def test_ensure_built_names_a_missing_tool(
    missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _fake_shim(tmp_path)
    present = {"java": "exit 0", "mvn": FAKE_MVN_OK}
    del present[missing]
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, present)))
    with pytest.raises(EmbeddedKafkaError, match=f"`{missing}` was not found"):
        jvm.ensure_built(shim)


def test_ensure_built_without_a_pom_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedKafkaError, match=str(tmp_path)):
        jvm.ensure_built(tmp_path)


def test_java_command_runs_the_main_class_with_a_bounded_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, {"java": "exit 0"})))
    build = jvm.ShimBuild(shim_dir=tmp_path, classpath=(tmp_path / "a.jar", tmp_path / "b.jar"))
    command = jvm.java_command(build, jvm.BROKER_MAIN_CLASS, ["server.properties", "id"])
    assert command[0] == str(tmp_path / "bin" / "java")
    assert "-Xmx1g" in command
    cp = command[command.index("-cp") + 1]
    assert cp == f"{tmp_path / 'a.jar'}{os.pathsep}{tmp_path / 'b.jar'}"
    assert command[-3:] == [jvm.BROKER_MAIN_CLASS, "server.properties", "id"]


# --- the stdout/stdin protocol, with a stand-in process ----------------------------------------------

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


def _process(tmp_path: Path, script: str) -> jvm.BrokerProcess:
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
    return jvm.BrokerProcess(popen, log)


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
