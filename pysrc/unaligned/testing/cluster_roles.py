"""Which node of an embedded Kafka cluster does what: partition leaders and in-sync replicas,
and the coordinators of transactional ids and consumer groups.

Asked through kafka-python's public admin API (``describe_topics``), never from a cache: a
test that kills "the leader" or "the transaction coordinator" asks right before it does. A
coordinator is the leader of the partition of ``__transaction_state`` / ``__consumer_offsets``
that holds its key (:func:`coordinator_partition`, the placement Kafka's coordinators use).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kafka import KafkaAdminClient
from unaligned.errors import EmbeddedKafkaError

TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class PartitionState:
    """One partition's leader (-1 while it has none), replicas and in-sync replicas (node ids)."""

    leader: int
    replicas: tuple[int, ...]
    in_sync: tuple[int, ...]


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__transaction_state`` / ``__consumer_offsets`` that holds ``key`` (a
    transactional id or a group id): ``Utils.abs(key.hashCode()) % partitions``, as Kafka's
    transaction and group coordinators place them (Java's ``String.hashCode`` over UTF-16)."""
    code = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        code = (31 * code + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return (code & 0x7FFFFFFF) % partitions


def partition_states(admin: KafkaAdminClient, topic: str) -> dict[int, PartitionState]:
    """Every partition of ``topic`` as the cluster describes it now."""
    for described in admin.describe_topics([topic]):
        if described.get("name") == topic and described.get("error_code", 0) == 0:
            return {
                int(p["partition_index"]): PartitionState(
                    int(p.get("leader_id", -1)),
                    tuple(sorted(p.get("replica_nodes") or ())),
                    tuple(sorted(p.get("isr_nodes") or ())),
                )
                for p in described.get("partitions") or []
            }
    raise EmbeddedKafkaError(
        f"topic {topic!r} is not known to the cluster (Kafka creates {TRANSACTION_STATE_TOPIC} "
        f"and {CONSUMER_OFFSETS_TOPIC} on the first use of a transaction or a group)"
    )


def partition_state(admin: KafkaAdminClient, topic: str, partition: int) -> PartitionState:
    states = partition_states(admin, topic)
    if partition not in states:
        raise EmbeddedKafkaError(f"topic {topic!r} has no partition {partition}")
    return states[partition]


def coordinator(admin: KafkaAdminClient, internal_topic: str, key: str) -> int:
    """The node id leading ``key``'s partition of ``internal_topic`` (-1 while none does)."""
    states = partition_states(admin, internal_topic)
    return states[coordinator_partition(key, len(states))].leader


def wait_fully_replicated(admin: KafkaAdminClient, topic: str, timeout_s: float) -> None:
    """Block until every partition of ``topic`` has all its replicas in sync (a node that came
    back has caught up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lagging = {
            p: s.in_sync
            for p, s in partition_states(admin, topic).items()
            if s.in_sync != s.replicas
        }
        if not lagging:
            return
        if time.monotonic() > deadline:
            raise EmbeddedKafkaError(
                f"{topic}: partitions {lagging} (in-sync replicas) not fully replicated within "
                f"{timeout_s:.0f} s"
            )
        time.sleep(0.2)
