"""EmbeddedKafka: a real Kafka cluster (KRaft) of one node or several, for tests, demos and
benchmarks.

The brokers are Apache Kafka itself, built by :mod:`unaligned.testing.shim_build` and run in
JVMs by :mod:`unaligned.testing.cluster_nodes`; this module wraps kafka-python clients for topic
admin (:mod:`unaligned.testing.topic_admin`), produce and consume
(:mod:`unaligned.testing.topic_records`) and answers
which node leads a partition or coordinates a transactional id or a consumer group.
Everything listens on 127.0.0.1 only.

    with EmbeddedKafka() as kafka:                 # one node: replication 1
        kafka.create_topic("in", partitions=4)
        kafka.produce("in", [(None, b"k", b"v", None, None)])
        records = kafka.consume_all("in")

    with EmbeddedKafka(brokers=3) as kafka:        # replication 3, min.insync.replicas 2
        kafka.node(kafka.leader("in", 0)).kill()   # or stop(), freeze(); then restart()

    with EmbeddedKafka(security=BrokerSecurity(tls, users={"alice": "pw"})) as kafka:
        kafka.listener_bootstrap("SASL_SSL")      # also SSL, MTLS (and OAUTH with an issuer)

    with EmbeddedKafka(security=BrokerSecurity(tls, {"alice": "pw"}, acls=True)) as kafka:
        kafka.allow("User:alice", "TOPIC", "out", ["WRITE", "DESCRIBE"])

Offsets follow Kafka's rules: an "end offset" is the offset the next record will get
(exclusive end); ``delete_records(topic, p, before_offset)`` makes ``before_offset`` the first
readable offset of partition ``p``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from kafka.consumer.fetcher import ConsumerRecord

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from unaligned.errors import EmbeddedKafkaError
from unaligned.testing import cluster_nodes, cluster_roles, shim_build, topic_records
from unaligned.testing.cluster_nodes import KafkaNode
from unaligned.testing.secured_listeners import BrokerSecurity
from unaligned.testing.topic_admin import CLIENT_TIMEOUT_S, TopicAdmin
from unaligned.testing.topic_records import Header, ProduceRecord

__all__ = ["EmbeddedKafka", "Header", "KafkaNode", "ProduceRecord"]

logger = logging.getLogger(__name__)


class EmbeddedKafka(TopicAdmin):
    """A KRaft Kafka cluster of ``brokers`` nodes on free loopback ports, transactions enabled.

    ``data_dir``: where the nodes keep their files (a temporary directory when ``None``).
    ``port``: node 1's client port on 127.0.0.1 (a free one when ``None``).
    ``broker_properties``: server properties that override the defaults of
    :func:`unaligned.testing.broker_config.broker_properties` on every node. ``security``:
    secured listeners every node opens besides its plaintext one
    (:mod:`unaligned.testing.secured_listeners`; the test kit's own clients keep to plaintext).
    The constructor has no side effects; the cluster runs between ``__enter__`` and
    ``__exit__``. ``kafka_version``: run that Apache Kafka release (3.6.2 to 4.4.0) instead of
    the test kit's default, built once from Maven's artifacts in a directory of its own.
    """

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        broker_properties: Mapping[str, str] | None = None,
        port: int | None = None,
        brokers: int = 1,
        security: BrokerSecurity | None = None,
        kafka_version: str | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"EmbeddedKafka needs at least one broker, got {brokers}")
        self._requested_data_dir = data_dir
        self._requested_port = port
        self._overrides = dict(broker_properties or {})
        self._broker_count = brokers
        self._security = security
        self._kafka_version = kafka_version
        self._data_dir: Path | None = None
        self._owns_data_dir = False
        self._nodes: list[KafkaNode] = []
        self._bootstrap: str | None = None
        self._admin: KafkaAdminClient | None = None
        self._producer: KafkaProducer | None = None
        self.startup_seconds: float | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> EmbeddedKafka:
        build = shim_build.ensure_built(kafka_version=self._kafka_version)
        self._make_data_dir()
        assert self._data_dir is not None
        started = time.monotonic()
        try:
            self._nodes = cluster_nodes.start_nodes(
                build,
                self._data_dir,
                self._broker_count,
                first_broker_port=self._requested_port,
                overrides=self._overrides,
                security=self._security,
            )
            self._bootstrap = ",".join(node.bootstrap for node in self._nodes)
            self._admin = self._connect_admin()
        except BaseException:
            self._shutdown()
            raise
        self.startup_seconds = time.monotonic() - started
        logger.info("embedded Kafka at %s ready in %.1f s", self._bootstrap, self.startup_seconds)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._shutdown()

    def _make_data_dir(self) -> None:
        if self._requested_data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="embedded-kafka-"))
            self._owns_data_dir = True
        else:
            self._data_dir = Path(self._requested_data_dir)
            self._data_dir.mkdir(parents=True, exist_ok=True)
            self._owns_data_dir = False

    def _connect_admin(self) -> KafkaAdminClient:
        """An admin client, once the broker answers metadata requests (bounded wait)."""
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            admin: KafkaAdminClient | None = None
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap_servers,
                    client_id="embedded-kafka-admin",
                    request_timeout_ms=30000,
                )
                # a metadata request (not describe_cluster: kafka-python reads DescribeCluster
                # v1's endpoint_type, which Kafka 3.6 does not send); the launcher's own Admin
                # client already saw the broker in describe-cluster before it said READY
                admin.list_topics()
                return admin
            except Exception as exc:  # the broker may still be settling: retry until the deadline
                last_error = exc
            if admin is not None:
                admin.close()
            time.sleep(0.2)
        tail = "\n".join(f"node {n.node_id}:\n{n.log_tail()}" for n in self._nodes)
        raise EmbeddedKafkaError(
            f"embedded Kafka at {self._bootstrap} did not serve metadata within "
            f"{CLIENT_TIMEOUT_S:.0f} s ({last_error!r}); broker log tail:\n{tail}"
        )

    def _shutdown(self) -> None:
        for client in (self._producer, self._admin):
            if client is not None:
                try:
                    client.close()
                except Exception as exc:  # closing a client must not keep the broker running
                    logger.warning("embedded Kafka: closing a client failed: %r", exc)
        self._producer = None
        self._admin = None
        # A cluster's data is deleted below: no node needs a controlled shutdown, and the last
        # ones could not have one anyway (their controller quorum goes first).
        for node in self._nodes:
            if len(self._nodes) == 1:
                node.stop()
            elif node.running:
                node.kill()
        if self._nodes:
            logger.info("embedded Kafka at %s stopped", self._bootstrap)
        if self._data_dir is not None:
            if self._owns_data_dir:
                shutil.rmtree(self._data_dir, ignore_errors=True)
            else:
                for node in self._nodes:
                    shutil.rmtree(node.directory, ignore_errors=True)
            self._data_dir = None
        self._nodes = []
        self._bootstrap = None

    # --- properties ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker."""
        if self._bootstrap is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return self._bootstrap

    def listener_bootstrap(self, listener: str) -> str:
        """The bootstrap servers of the secured listener named ``listener`` on every node
        (``SSL``, ``MTLS``, ``SASL_SSL``, ``OAUTH``: :mod:`unaligned.testing.secured_listeners`)."""
        return ",".join(node.listener_bootstrap(listener) for node in self.nodes)

    @property
    def broker_pid(self) -> int:
        """Process id of node 1's JVM (the only one of a single-node cluster)."""
        return self.node(1).pid

    @property
    def broker_log(self) -> Path:
        """Node 1's log file (WARN and above)."""
        return self.node(1).log_file

    # --- nodes and their roles ----------------------------------------------------------------

    @property
    def nodes(self) -> list[KafkaNode]:
        """Every node, by id (1, 2, ...); stopped or killed ones included."""
        if not self._nodes:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return list(self._nodes)

    def node(self, node_id: int) -> KafkaNode:
        """The node with id ``node_id`` (to stop, kill, freeze, thaw or restart it)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise EmbeddedKafkaError(f"no Kafka node {node_id} (nodes 1..{len(self._nodes)})")

    def _running_node(self) -> KafkaNode:
        for node in self.nodes:
            if node.running:
                return node
        raise EmbeddedKafkaError("no node of the embedded Kafka is running")

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``-``partition`` now (-1 while it has none)."""
        return self._ask(lambda a: cluster_roles.partition_state(a, topic, partition).leader)

    def in_sync_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        """The node ids in ``topic``-``partition``'s in-sync replica set now."""
        return self._ask(lambda a: cluster_roles.partition_state(a, topic, partition).in_sync)

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node id coordinating ``transactional_id`` now."""
        topic = cluster_roles.TRANSACTION_STATE_TOPIC
        return self._ask(lambda a: cluster_roles.coordinator(a, topic, transactional_id))

    def group_coordinator(self, group_id: str) -> int:
        """The node id coordinating consumer group ``group_id`` now (``__consumer_offsets``
        exists once any group was used)."""
        topic = cluster_roles.CONSUMER_OFFSETS_TOPIC
        return self._ask(lambda a: cluster_roles.coordinator(a, topic, group_id))

    def wait_fully_replicated(self, topic: str, timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        """Block until every partition of ``topic`` has all its replicas in sync again."""
        self._ask(lambda a: cluster_roles.wait_fully_replicated(a, topic, timeout_s))

    def _admin_client(self) -> KafkaAdminClient:
        if self._admin is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return self._admin

    def _replace_admin_client(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:  # a client whose node went away may fail to close
                logger.debug("embedded Kafka: closing the old admin client failed", exc_info=True)
        self._admin = self._connect_admin()

    def throttle_producers(self, bytes_per_second: int | None) -> None:
        """Set (or with ``None`` remove) the default client quota ``producer_byte_rate``: every
        producer without a more specific quota is throttled to ``bytes_per_second``. Returns
        once the broker shows the new quota."""
        self._quota_command("DEFAULT-CLIENT-QUOTA", bytes_per_second)

    def throttle_producers_together(self, bytes_per_second: int | None) -> None:
        """Set (or with ``None`` remove) the default *user* quota ``producer_byte_rate``: all
        producers of one user share ``bytes_per_second`` (every client of this broker is the
        unauthenticated user ANONYMOUS), however many client ids they have. Returns once the
        broker shows the new quota."""
        self._quota_command("DEFAULT-USER-QUOTA", bytes_per_second)

    def allow(
        self,
        principal: str,
        resource_type: str,
        name: str,
        operations: Iterable[str],
        *,
        prefixed: bool = False,
    ) -> None:
        """Allow ``principal`` (``User:alice``) ``operations`` (Kafka's names: ``WRITE``,
        ``DESCRIBE``, ``TWO_PHASE_COMMIT``...) on a resource (``TOPIC``, ``TRANSACTIONAL_ID``,
        ``GROUP``, ``CLUSTER`` named ``kafka-cluster``; names starting with ``name`` if
        ``prefixed``), from any host, on a cluster with ACLs
        (:class:`~unaligned.testing.secured_listeners.BrokerSecurity` ``acls``). Returns once
        the broker's authorizer has them."""
        pattern = "PREFIXED" if prefixed else "LITERAL"
        ops = ",".join(operations)
        self._running_node().command(f"ACL {principal} {resource_type} {pattern} {name} {ops}")

    def _quota_command(self, command: str, bytes_per_second: int | None) -> None:
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be positive or None, got {bytes_per_second}")
        value = "-" if bytes_per_second is None else str(int(bytes_per_second))
        self._running_node().command(f"{command} producer_byte_rate {value}")

    # --- offsets -------------------------------------------------------------------------------

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Log end offsets per partition (the offset the next record will get)."""
        return self._end_offsets(topic, "read_uncommitted")

    def last_stable_offsets(self, topic: str) -> dict[int, int]:
        """End offsets a read_committed consumer sees (the last stable offset per partition:
        below the first record of a still-open transaction)."""
        return self._end_offsets(topic, "read_committed")

    def _end_offsets(self, topic: str, isolation_level: str) -> dict[int, int]:
        partitions = [TopicPartition(topic, p) for p in self.partitions(topic)]
        consumer = topic_records.new_consumer(self.bootstrap_servers, isolation_level)
        try:
            offsets = consumer.end_offsets(partitions)
        finally:
            consumer.close()
        return {tp.partition: int(offset) for tp, offset in offsets.items()}

    # --- produce and consume (unaligned.testing.topic_records) -----------------------------------

    def produce(self, topic: str, records: Iterable[ProduceRecord]) -> None:
        """Send ``(partition, key, value, headers, timestamp_ms)`` records (non-transactional,
        acks=all) and wait until the broker has acknowledged every one."""
        topic_records.send_and_wait(self._shared_producer(), topic, records, CLIENT_TIMEOUT_S)

    def _shared_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = topic_records.new_producer(self.bootstrap_servers, CLIENT_TIMEOUT_S)
        return self._producer

    def consume_all(self, topic: str, *, read_committed: bool = True) -> list[ConsumerRecord]:
        """Every record of ``topic`` from each partition's first readable offset to its end
        offset at call time (the last stable offset when ``read_committed``), ordered by
        partition, then offset. Aborted records are never returned with ``read_committed``."""
        isolation_level = "read_committed" if read_committed else "read_uncommitted"
        partitions = [TopicPartition(topic, p) for p in self.partitions(topic)]
        consumer = topic_records.new_consumer(self.bootstrap_servers, isolation_level)
        try:
            return topic_records.read_to_end(consumer, topic, partitions, CLIENT_TIMEOUT_S)
        finally:
            consumer.close()
