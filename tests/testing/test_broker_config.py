"""unaligned.testing.broker_config: one node's properties, alone or in a cluster; ids and ports."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from unaligned.testing import broker_config
from unaligned.testing.broker_config import NodePorts


def test_broker_properties_listen_on_loopback_with_single_node_replication(tmp_path: Path) -> None:
    props = broker_config.broker_properties(
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
    props = broker_config.broker_properties(broker_port=1, controller_port=2, log_dir=tmp_path)
    addresses = props["listeners"].split(",") + props["advertised.listeners"].split(",")
    for address in addresses:
        host = address.split("://", 1)[1].rsplit(":", 1)[0]
        assert host == "127.0.0.1", address


def test_overrides_win_and_are_stringified(tmp_path: Path) -> None:
    props = broker_config.broker_properties(
        broker_port=1,
        controller_port=2,
        log_dir=tmp_path,
        overrides={"transaction.max.timeout.ms": 60000, "auto.create.topics.enable": "true"},  # type: ignore[dict-item]
    )
    assert props["transaction.max.timeout.ms"] == "60000"
    assert props["auto.create.topics.enable"] == "true"


def test_render_properties_escapes_what_java_properties_would_misread() -> None:
    text = broker_config.render_properties(
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
    ids = {broker_config.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_free_loopback_port_is_bindable_on_loopback() -> None:
    import socket

    port = broker_config.free_loopback_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert sock.getsockname() == ("127.0.0.1", port)


def test_a_node_of_three_votes_with_every_node_and_replicates_as_production_does(
    tmp_path: Path,
) -> None:
    voters = [NodePorts(1, 9001, 9101), NodePorts(2, 9002, 9102), NodePorts(3, 9003, 9103)]
    props = broker_config.broker_properties(
        broker_port=9002, controller_port=9102, log_dir=tmp_path, node_id=2, voters=voters
    )
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert props[key] == "3", key
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"


def test_replication_follows_the_node_count_up_to_three() -> None:
    two = broker_config.replication_settings(2)
    assert two["default.replication.factor"] == "2" and two["min.insync.replicas"] == "1"
    five = broker_config.replication_settings(5)
    assert five["default.replication.factor"] == "3" and five["min.insync.replicas"] == "2"


def test_a_node_outside_its_voters_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="node 4 is not among the voters"):
        broker_config.broker_properties(
            broker_port=1,
            controller_port=2,
            log_dir=tmp_path,
            node_id=4,
            voters=[NodePorts(1, 1, 2)],
        )
