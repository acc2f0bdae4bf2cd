"""The JVMs of an embedded Kafka cluster: one :class:`KafkaNode` per KRaft node, started together.

:func:`start_nodes` picks free loopback ports for ``count`` nodes, writes each node's
properties (:mod:`unaligned.testing.broker_config`: a static controller quorum of every node)
into its own directory under ``data_dir`` (``node-<id>/``), launches them all and waits until
each answers metadata requests. A port taken between choosing and binding it makes it try again
with new ports. With :class:`~unaligned.testing.secured_listeners.BrokerSecurity` every node
also gets a port for each secured listener, its SCRAM users at format time and the JVM options
its OIDC validator needs.

A node can then be faulted and brought back by id, as a rolling upgrade or a lost host would:

- :meth:`KafkaNode.stop`: SIGTERM, a controlled shutdown (leaderships move first);
- :meth:`KafkaNode.kill`: SIGKILL, no shutdown at all;
- :meth:`KafkaNode.freeze` / :meth:`KafkaNode.thaw`: SIGSTOP / SIGCONT;
- :meth:`KafkaNode.start`: a new JVM on the same ports and log directory (already formatted with
  the cluster id, so it rejoins the cluster and catches up its replicas).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from unaligned.errors import EmbeddedKafkaError
from unaligned.testing import broker_config, broker_process
from unaligned.testing.broker_config import NodePorts
from unaligned.testing.broker_process import BrokerProcess, ShimBuild
from unaligned.testing.secured_listeners import BrokerSecurity

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0  # two cores shared with Spark: a cold JVM start can be slow
STOP_TIMEOUT_S = 30.0
_START_ATTEMPTS = 3  # a free port can be taken between choosing it and binding it
#: Heap of a node in a cluster of several (a single node keeps the launcher's default).
CLUSTER_NODE_HEAP = "512m"

# Names of what a node keeps inside its directory.
PROPERTIES_FILE = "server.properties"
LOG_FILE = "broker.log"
LOG_DIR = "kafka-logs"


class KafkaNode:
    """One KRaft node (broker and controller) of an embedded cluster; see the module docstring.

    The constructor writes nothing and starts nothing; :meth:`start` launches the JVM."""

    def __init__(
        self,
        build: ShimBuild,
        ports: NodePorts,
        directory: Path,
        cluster_id: str,
        heap: str = broker_process.DEFAULT_HEAP,
        security: BrokerSecurity | None = None,
    ) -> None:
        self.ports = ports
        self.directory = directory
        self._build = build
        self._cluster_id = cluster_id
        self._heap = heap
        self._security = security
        self._process: BrokerProcess | None = None

    @property
    def node_id(self) -> int:
        return self.ports.node_id

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<broker port>``."""
        return f"127.0.0.1:{self.ports.broker_port}"

    def listener_bootstrap(self, listener: str) -> str:
        """``127.0.0.1:<port>`` of the secured listener named ``listener`` (``SSL``...)."""
        port = self.ports.secured_ports.get(listener)
        if port is None:
            raise EmbeddedKafkaError(
                f"Kafka node {self.node_id} has no listener {listener!r} (secured listeners: "
                f"{sorted(self.ports.secured_ports) or 'none'})"
            )
        return f"127.0.0.1:{port}"

    @property
    def log_file(self) -> Path:
        """The node's log (WARN and above), kept across restarts."""
        return self.directory / LOG_FILE

    @property
    def running(self) -> bool:
        """True while the node's JVM is alive (frozen counts as alive)."""
        return self._process is not None and self._process.popen.poll() is None

    @property
    def pid(self) -> int:
        return self._require().pid

    def write_properties(
        self, voters: Sequence[NodePorts], overrides: Mapping[str, str] | None
    ) -> None:
        props = broker_config.broker_properties(
            broker_port=self.ports.broker_port,
            controller_port=self.ports.controller_port,
            log_dir=self.directory / LOG_DIR,
            node_id=self.node_id,
            voters=voters,
            overrides=overrides,
            security=self._security,
            secured_ports=self.ports.secured_ports,
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / PROPERTIES_FILE).write_text(broker_config.render_properties(props))

    def start(self) -> None:
        """Launch the node's JVM (call :meth:`wait_ready` after); a running node is an error."""
        if self.running:
            raise EmbeddedKafkaError(f"Kafka node {self.node_id} is already running")
        self._process = broker_process.launch_broker(
            self._build,
            properties_file=self.directory / PROPERTIES_FILE,
            cluster_id=self._cluster_id,
            log_file=self.log_file,
            heap=self._heap,
            extra_jvm_options=self._security.jvm_options() if self._security else (),
            format_arguments=self._security.format_arguments() if self._security else (),
        )

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until the node serves metadata (its READY line)."""
        self._require().wait_ready(timeout_s)

    def restart(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """:meth:`start` and :meth:`wait_ready`: the node is back in the cluster."""
        self.start()
        self.wait_ready(timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """A controlled shutdown (SIGTERM; SIGKILL after ``timeout_s``); returns the exit code.
        No-op (exit code 0) for a node that is not running."""
        if self._process is None:
            return 0
        code = self._process.stop(timeout_s)
        logger.info("Kafka node %d stopped (exit code %d)", self.node_id, code)
        return code

    def kill(self) -> None:
        """SIGKILL the node: a lost host."""
        self._require().kill()
        logger.info("Kafka node %d killed", self.node_id)

    def freeze(self) -> None:
        """SIGSTOP the node: alive to the network, answering nothing, until :meth:`thaw`."""
        self._require().freeze()

    def thaw(self) -> None:
        self._require().thaw()

    def command(self, line: str) -> str:
        """A shim command (``broker_process``'s protocol) on this node."""
        return self._require().command(line)

    def log_tail(self) -> str:
        return self._process.log_tail() if self._process else "(never started)"

    def _require(self) -> BrokerProcess:
        if self._process is None:
            raise EmbeddedKafkaError(f"Kafka node {self.node_id} was never started")
        return self._process


def start_nodes(
    build: ShimBuild,
    data_dir: Path,
    count: int,
    *,
    first_broker_port: int | None = None,
    overrides: Mapping[str, str] | None = None,
    security: BrokerSecurity | None = None,
) -> list[KafkaNode]:
    """Start ``count`` nodes (ids 1..count) under ``data_dir`` and wait until every one is ready.
    ``first_broker_port``: node 1's client port (a free one when ``None``); ``security``: the
    secured listeners every node opens besides its plaintext one."""
    if count < 1:
        raise ValueError(f"a Kafka cluster needs at least one node, got {count}")
    heap = broker_process.DEFAULT_HEAP if count == 1 else CLUSTER_NODE_HEAP
    for attempt in range(1, _START_ATTEMPTS + 1):
        cluster_id = broker_config.new_cluster_id()
        ports = [
            NodePorts(
                node_id,
                first_broker_port
                if node_id == 1 and first_broker_port
                else broker_config.free_loopback_port(),
                broker_config.free_loopback_port(),
                {
                    listener.name: broker_config.free_loopback_port()
                    for listener in (security.listeners if security else ())
                },
            )
            for node_id in range(1, count + 1)
        ]
        nodes = [
            KafkaNode(build, p, data_dir / f"node-{p.node_id}", cluster_id, heap, security)
            for p in ports
        ]
        try:
            for node in nodes:
                node.write_properties(ports, overrides)
                node.start()
            for node in nodes:
                node.wait_ready()
            return nodes
        except EmbeddedKafkaError:
            port_taken = any("Address already in use" in _log_text(n.log_file) for n in nodes)
            for node in nodes:
                node.stop()
            if port_taken and first_broker_port:
                raise EmbeddedKafkaError(
                    f"port {first_broker_port} on 127.0.0.1 is already in use"
                ) from None
            if not port_taken or attempt == _START_ATTEMPTS:
                raise
            logger.warning(
                "embedded Kafka: a chosen port was taken; retrying (attempt %d)", attempt
            )
            for node in nodes:
                shutil.rmtree(node.directory, ignore_errors=True)
    raise AssertionError("unreachable")


def _log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-20000:]
    except FileNotFoundError:
        return ""
