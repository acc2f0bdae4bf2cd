"""The embedded Kafka's server properties: one KRaft node of a cluster of one or more, on loopback.

Every node runs broker and controller in one JVM (``process.roles=broker,controller``) and
votes in a static controller quorum (``controller.quorum.voters``, every node). Replication
follows the cluster's size as a production cluster's would: with three or more nodes, topics
and the internal topics get replication factor 3 and ``min.insync.replicas`` 2, so one node
can be lost (killed, frozen, restarted) and every write with ``acks=all`` still succeeds; with
one node, everything is 1. Timing settings are Kafka's defaults except where a test would wait
for nothing (the first consumer group rebalance, client quota windows), and those are named
below. A node with :class:`~unaligned.testing.secured_listeners.BrokerSecurity` also opens its
secured listeners (TLS, mutual TLS, SASL_SSL, OAUTHBEARER) after the ``PLAINTEXT`` one, which
stays first (inter-broker traffic and the test kit's own clients). ``overrides`` win over every
default.

:func:`render_properties` writes them as a Java ``.properties`` file;
:func:`free_loopback_port` and :func:`new_cluster_id` pick the ports and the KRaft cluster id.
"""

from __future__ import annotations

import base64
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from unaligned.testing.secured_listeners import BrokerSecurity

#: Server properties that let transactions take part in two-phase commit (KIP-939) on Apache
#: Kafka 4.4.0, which advertises ``InitProducerId`` v6 (``enable2Pc``) only with unstable API
#: versions enabled (v6 is the only version that setting changes in 4.4.0). The shared broker of
#: the integration tests runs with them, so the sink's default (``auto``) takes two-phase commit
#: there.
TWO_PHASE_COMMIT: dict[str, str] = {
    "transaction.two.phase.commit.enable": "true",
    "unstable.api.versions.enable": "true",
}

#: Replication factor and ``min.insync.replicas`` of a cluster of at least this many nodes.
FULL_REPLICATION = 3
FULL_MIN_INSYNC = 2


@dataclass(frozen=True)
class NodePorts:
    """Where one node listens on 127.0.0.1: its broker (client) and controller ports, and the
    port of each secured listener by name (none without security)."""

    node_id: int
    broker_port: int
    controller_port: int
    secured_ports: Mapping[str, int] = field(default_factory=dict)


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


def replication_settings(node_count: int) -> dict[str, str]:
    """Replication of topics, consumer offsets and transaction state for ``node_count`` nodes:
    factor 3 and min ISR 2 from :data:`FULL_REPLICATION` nodes on, else every node and 1."""
    factor = min(node_count, FULL_REPLICATION)
    min_isr = FULL_MIN_INSYNC if node_count >= FULL_REPLICATION else 1
    return {
        "default.replication.factor": str(factor),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(factor),
        "transaction.state.log.replication.factor": str(factor),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(factor),
        "share.coordinator.state.topic.min.isr": str(min_isr),
    }


def broker_properties(
    *,
    broker_port: int,
    controller_port: int,
    log_dir: Path,
    node_id: int = 1,
    voters: Sequence[NodePorts] = (),
    overrides: Mapping[str, str] | None = None,
    security: BrokerSecurity | None = None,
    secured_ports: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """Server properties of node ``node_id`` on loopback only.

    ``voters``: every node of the cluster (this one included); empty means a cluster of this
    node alone. ``security``: the secured listeners to open, on ``secured_ports`` (listener name
    -> port). Internal topics get few partitions for a quick start; client quotas act within
    about a second. ``overrides`` win over the defaults.
    """
    nodes = list(voters) or [NodePorts(node_id, broker_port, controller_port)]
    if node_id not in {n.node_id for n in nodes}:
        raise ValueError(f"node {node_id} is not among the voters {[n.node_id for n in nodes]}")
    secured = security.listeners if security is not None else ()
    ports = secured_ports or {}
    missing = [listener.name for listener in secured if listener.name not in ports]
    if missing:
        raise ValueError(f"node {node_id} has no port for its secured listener(s) {missing}")
    client_listeners = [f"PLAINTEXT://127.0.0.1:{broker_port}"] + [
        f"{listener.name}://127.0.0.1:{ports[listener.name]}" for listener in secured
    ]
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(
            f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes
        ),
        "listeners": ",".join([*client_listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
        "advertised.listeners": ",".join(client_listeners),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(
            ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
            + [f"{listener.name}:{listener.protocol}" for listener in secured]
        ),
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        **replication_settings(len(nodes)),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4",
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
    if security is not None:
        props.update(security.server_properties())
    if overrides:
        props.update({str(key): str(value) for key, value in overrides.items()})
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """Java ``.properties`` text; keys and values are escaped so that ``Properties.load`` reads
    them back."""

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
