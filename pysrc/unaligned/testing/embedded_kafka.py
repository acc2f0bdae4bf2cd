"""EmbeddedKafka: a real single-node Kafka broker (KRaft) for tests, demos and benchmarks.

The broker is Apache Kafka itself, built by :mod:`unaligned.testing.shim_build` and run in a JVM
by :mod:`unaligned.testing.broker_process`; this module only picks ports and directories, waits
for the broker, and wraps kafka-python clients for topic admin, produce and consume (the last
two in :mod:`unaligned.testing.topic_records`). Everything listens on 127.0.0.1 only.

    with EmbeddedKafka() as kafka:
        kafka.create_topic("in", partitions=4)
        kafka.produce("in", [(None, b"k", b"v", None, None)])
        records = kafka.consume_all("in")

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

from kafka.admin import ConfigResource, ConfigResourceType
from kafka.consumer.fetcher import ConsumerRecord

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from unaligned.errors import EmbeddedKafkaError
from unaligned.testing import broker_process, shim_build, topic_records
from unaligned.testing.topic_records import Header, ProduceRecord

__all__ = ["EmbeddedKafka", "Header", "ProduceRecord"]

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0  # two cores shared with Spark: a cold JVM start can be slow
STOP_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 60.0
_START_ATTEMPTS = 3  # a free port can be taken between choosing it and binding it

# Names of what EmbeddedKafka creates inside its data directory (all removed on exit).
PROPERTIES_FILE = "server.properties"
LOG_FILE = "broker.log"
LOG_DIR = "kafka-logs"


class EmbeddedKafka:
    """A single-node KRaft Kafka broker on a free loopback port, transactions enabled.

    ``data_dir``: where the broker keeps its files (a temporary directory when ``None``).
    ``port``: the broker's port on 127.0.0.1 (a free one when ``None``).
    ``broker_properties``: server properties that override the defaults of
    :func:`unaligned.testing.broker_process.broker_properties`. The constructor has no side
    effects; the broker runs between ``__enter__`` and ``__exit__``.
    """

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        broker_properties: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self._requested_data_dir = data_dir
        self._requested_port = port
        self._overrides = dict(broker_properties or {})
        self._data_dir: Path | None = None
        self._owns_data_dir = False
        self._broker: broker_process.BrokerProcess | None = None
        self._bootstrap: str | None = None
        self._admin: KafkaAdminClient | None = None
        self._producer: KafkaProducer | None = None
        self.startup_seconds: float | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> EmbeddedKafka:
        build = shim_build.ensure_built()
        self._make_data_dir()
        started = time.monotonic()
        try:
            self._start_broker(build)
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

    def _start_broker(self, build: broker_process.ShimBuild) -> None:
        assert self._data_dir is not None
        log_file = self._data_dir / LOG_FILE
        for attempt in range(1, _START_ATTEMPTS + 1):
            props = broker_process.broker_properties(
                broker_port=self._requested_port or broker_process.free_loopback_port(),
                controller_port=broker_process.free_loopback_port(),
                log_dir=self._data_dir / LOG_DIR,
                overrides=self._overrides,
            )
            properties_file = self._data_dir / PROPERTIES_FILE
            properties_file.write_text(broker_process.render_properties(props))
            broker = broker_process.launch_broker(
                build,
                properties_file=properties_file,
                cluster_id=broker_process.new_cluster_id(),
                log_file=log_file,
            )
            self._broker = broker
            try:
                self._bootstrap = broker.wait_ready(READY_TIMEOUT_S)
                return
            except EmbeddedKafkaError:
                broker.stop(STOP_TIMEOUT_S)
                self._broker = None
                port_taken = "Address already in use" in broker.log_tail(200)
                if port_taken and self._requested_port:
                    raise EmbeddedKafkaError(
                        f"port {self._requested_port} on 127.0.0.1 is already in use"
                    ) from None
                if not port_taken or attempt == _START_ATTEMPTS:
                    raise
                logger.warning(
                    "embedded Kafka: a chosen port was taken; retrying (attempt %d)", attempt
                )
                shutil.rmtree(self._data_dir / LOG_DIR, ignore_errors=True)
                log_file.unlink(missing_ok=True)

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
                if admin.describe_cluster().get("brokers"):
                    return admin
            except Exception as exc:  # the broker may still be settling: retry until the deadline
                last_error = exc
            if admin is not None:
                admin.close()
            time.sleep(0.2)
        tail = self._broker.log_tail() if self._broker else ""
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
        if self._broker is not None:
            code = self._broker.stop(STOP_TIMEOUT_S)
            logger.info("embedded Kafka at %s stopped (exit code %d)", self._bootstrap, code)
            self._broker = None
        if self._data_dir is not None:
            if self._owns_data_dir:
                shutil.rmtree(self._data_dir, ignore_errors=True)
            else:
                shutil.rmtree(self._data_dir / LOG_DIR, ignore_errors=True)
                for name in (PROPERTIES_FILE, LOG_FILE):
                    (self._data_dir / name).unlink(missing_ok=True)
            self._data_dir = None
        self._bootstrap = None

    # --- properties ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker."""
        if self._bootstrap is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return self._bootstrap

    @property
    def broker_pid(self) -> int:
        """Process id of the broker's JVM."""
        if self._broker is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return self._broker.pid

    @property
    def broker_log(self) -> Path:
        """The broker's log file (WARN and above)."""
        if self._broker is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return self._broker.log_file

    def _admin_client(self) -> KafkaAdminClient:
        if self._admin is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        return self._admin

    # --- topics -------------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name`` with ``partitions`` partitions (replication factor 1); returns once
        every partition has a leader."""
        spec = {
            name: {
                "num_partitions": partitions,
                "replication_factor": 1,
                "configs": {str(k): str(v) for k, v in (config or {}).items()},
            }
        }
        try:
            self._admin_client().create_topics(spec, wait_for_metadata=True)
        except Exception as exc:
            raise EmbeddedKafkaError(
                f"creating topic {name!r} ({partitions} partitions) on {self.bootstrap_servers} "
                f"failed: {exc!r}"
            ) from exc

    def add_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions; returns once every partition has a
        leader."""
        admin = self._admin_client()
        try:
            admin.create_partitions({name: total})
            self._wait_for_partition_count(name, total)
        except EmbeddedKafkaError:
            raise
        except Exception as exc:
            raise EmbeddedKafkaError(
                f"growing topic {name!r} to {total} partitions on {self.bootstrap_servers} "
                f"failed: {exc!r}"
            ) from exc

    def _wait_for_partition_count(self, name: str, total: int) -> None:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:
            partitions = self._partition_leaders(name)
            if len(partitions) >= total and all(leader >= 0 for leader in partitions.values()):
                return
            if time.monotonic() > deadline:
                raise EmbeddedKafkaError(
                    f"topic {name!r} did not reach {total} partitions with leaders within "
                    f"{CLIENT_TIMEOUT_S:.0f} s (has {partitions})"
                )
            time.sleep(0.1)

    def _partition_leaders(self, name: str) -> dict[int, int]:
        topics = self._admin_client().describe_topics([name])
        for topic in topics:
            if topic.get("name") == name and topic.get("error_code", 0) == 0:
                return {
                    p["partition_index"]: p.get("leader_id", -1)
                    for p in topic.get("partitions") or []
                }
        return {}

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``, ascending."""
        leaders = self._partition_leaders(topic)
        if not leaders:
            raise EmbeddedKafkaError(f"topic {topic!r} does not exist on {self.bootstrap_servers}")
        return sorted(leaders)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Delete every record of ``topic``-``partition`` below ``before_offset`` (exclusive end):
        afterwards ``before_offset`` is the partition's first readable offset."""
        try:
            self._admin_client().delete_records({TopicPartition(topic, partition): before_offset})
        except Exception as exc:
            raise EmbeddedKafkaError(
                f"deleting records of {topic}-{partition} before offset {before_offset} "
                f"failed: {exc!r}"
            ) from exc

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name``; returns once the broker no longer lists it."""
        admin = self._admin_client()
        try:
            admin.delete_topics([name])
        except Exception as exc:
            raise EmbeddedKafkaError(f"deleting topic {name!r} failed: {exc!r}") from exc
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while name in admin.list_topics():
            if time.monotonic() > deadline:
                raise EmbeddedKafkaError(
                    f"topic {name!r} was still listed {CLIENT_TIMEOUT_S:.0f} s after deletion"
                )
            time.sleep(0.1)

    def set_topic_config(self, name: str, config: Mapping[str, str]) -> None:
        """Change settings of topic ``name`` (e.g. ``max.message.bytes``) while it is used."""
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=dict(config))
        try:
            self._admin_client().alter_configs([resource])
        except Exception as exc:
            raise EmbeddedKafkaError(f"altering {name!r} to {config} failed: {exc!r}") from exc

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

    def _quota_command(self, command: str, bytes_per_second: int | None) -> None:
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be positive or None, got {bytes_per_second}")
        if self._broker is None:
            raise EmbeddedKafkaError("EmbeddedKafka is not running (use it as a context manager)")
        value = "-" if bytes_per_second is None else str(int(bytes_per_second))
        self._broker.command(f"{command} producer_byte_rate {value}")

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
