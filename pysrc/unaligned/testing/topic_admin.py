"""Topic administration of the embedded Kafka, asked again while a node is away.

:class:`TopicAdmin` is the part of :class:`~unaligned.testing.EmbeddedKafka` that creates,
grows, describes and deletes topics and changes their settings, through kafka-python's public
admin API. Every question goes through :meth:`TopicAdmin._ask`: while a test kills, freezes or
restarts a node, a question that meets the node's absence (a connection refused, a broker its
metadata no longer lists, a controller that moved) is asked again on a new admin client, for up
to :data:`CLIENT_TIMEOUT_S`, so the test's own helpers ride through the faults it injects. The
class that uses it supplies the admin client, its replacement and the bootstrap servers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.admin import ConfigResource, ConfigResourceType

from kafka import KafkaAdminClient, TopicPartition
from unaligned.errors import EmbeddedKafkaError
from unaligned.testing.broker_config import FULL_REPLICATION

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLIENT_TIMEOUT_S = 60.0
#: Errors of a node being away: asked again on a new admin client (:meth:`TopicAdmin._ask`).
_TRANSIENT = (kafka_errors.RetriableError, kafka_errors.UnknownBrokerIdError)


def _creating(spec: Mapping[str, Any]) -> Callable[[KafkaAdminClient], None]:
    """``create_topics`` as asked again by :meth:`TopicAdmin._ask`: a topic that exists when the
    question is asked again was created by the attempt that failed (a node went away after the
    controller took it), so it counts as created; on the first attempt it is an error."""
    attempts = 0

    def create(admin: KafkaAdminClient) -> None:
        nonlocal attempts
        attempts += 1
        try:
            admin.create_topics(spec, wait_for_metadata=True)
        except kafka_errors.TopicAlreadyExistsError:
            if attempts == 1:
                raise

    return create


class TopicAdmin:
    """Topic administration (module docstring); ``_broker_count`` sets the replication."""

    _broker_count: int

    @property
    def bootstrap_servers(self) -> str:
        raise NotImplementedError

    def _admin_client(self) -> KafkaAdminClient:
        raise NotImplementedError

    def _replace_admin_client(self) -> None:
        """Close the admin client and connect a new one (fresh metadata)."""
        raise NotImplementedError

    def _ask(self, question: Callable[[KafkaAdminClient], T]) -> T:
        """``question(admin)``, asked again on a new admin client while a node is away (its
        metadata names a broker that left, a connection failed, a controller moved), for up to
        :data:`CLIENT_TIMEOUT_S`: a test's helpers ride through the faults it injects."""
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:
            try:
                return question(self._admin_client())
            except _TRANSIENT as exc:
                if time.monotonic() > deadline:
                    raise
                logger.info("embedded Kafka: %r; asking again on a new admin client", exc)
                self._replace_admin_client()
                time.sleep(0.5)

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name`` with ``partitions`` partitions (replication factor 1, or 3 on a
        cluster of three or more nodes); returns once every partition has a leader."""
        spec = {
            name: {
                "num_partitions": partitions,
                "replication_factor": min(self._broker_count, FULL_REPLICATION),
                "configs": {str(k): str(v) for k, v in (config or {}).items()},
            }
        }
        try:
            self._ask(_creating(spec))
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
        topics = self._ask(lambda a: a.describe_topics([name]))
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
            self._ask(lambda a: a.delete_records({TopicPartition(topic, partition): before_offset}))
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
            self._ask(lambda a: a.alter_configs([resource]))
        except Exception as exc:
            raise EmbeddedKafkaError(f"altering {name!r} to {config} failed: {exc!r}") from exc
