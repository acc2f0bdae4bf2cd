"""Each batch's end offsets committed to a Kafka consumer group, for monitoring only.

Spark never commits a query's offsets to Kafka (SPARK-27549), so Kafka's own lag tools
(``kafka-consumer-groups.sh --describe``, Burrow, lag exporters) cannot see a Spark query. With
``kafka.group.id`` or ``groupIdPrefix`` (Spark's option names) this source commits, after each
batch, the batch's end offsets (the next offset to read per partition) to a consumer group:

- ``kafka.group.id=G``: group ``G``;
- ``groupIdPrefix=P``: group ``P-<barrierToken>``, one per query (the token is kept in the
  checkpointed offsets, so a restarted query commits to the same group).

Spark calls the source's ``commit(end)`` once the batch ending at ``end`` is in its commit log,
so the group trails the query by at most one batch. The commit is a standalone one (generation
-1, the group has no members): no rebalance, no partition assignment, nothing read with it.

**The checkpoint stays the truth** for where a query resumes: the group's offsets are never read
back. A commit that fails (broker away, ACLs) is logged and skipped; it never fails the query.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.structs import OffsetAndMetadata, TopicPartition

from kafka import KafkaConsumer
from unaligned.kafka.clients.client_options import KafkaClientConfig, kafka_python_kwargs
from unaligned.source.offsets import KafkaSourceOffset

logger = logging.getLogger(__name__)

COMMIT_METADATA = "unaligned"


def group_id(group: str | None, prefix: str | None, barrier_token: str | None) -> str | None:
    """The group to commit to: ``kafka.group.id``, else ``<groupIdPrefix>-<token>``, else none."""
    if group:
        return group
    if prefix and barrier_token:
        return f"{prefix}-{barrier_token}"
    return None


class GroupOffsets:
    """Commits end offsets to the query's consumer group (driver, one per reader)."""

    def __init__(self, config: KafkaClientConfig, prefix: str | None) -> None:
        """``config``: the source's ``kafka.*`` settings (``kafka.group.id`` among them);
        ``prefix``: ``groupIdPrefix``."""
        self._config = config
        group = config.consumer_kwargs().get("group_id")
        self._group = group if isinstance(group, str) else None
        self._prefix = prefix
        self._consumer: KafkaConsumer | None = None
        self._consumer_group: str | None = None
        self._failing = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}

    def commit(self, end: KafkaSourceOffset) -> None:
        """Commit ``end``'s positions (next offsets to read) if the query has a group."""
        group = group_id(self._group, self._prefix, end.barrier_token)
        if group is None or not end.positions:
            return
        offsets = {
            TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(pos, COMMIT_METADATA, -1)
            for tp, pos in end.positions.items()
        }
        try:
            self._client(group).commit(offsets)
        except Exception as exc:  # monitoring only: never fail the query
            self.close()
            if not self._failing:
                logger.warning(
                    "could not commit offsets to consumer group %r (monitoring only; the query "
                    "goes on and retries at the next batch): %r",
                    group,
                    exc,
                )
            self._failing = True
            return
        if self._failing:
            logger.info("committing offsets to consumer group %r works again", group)
        self._failing = False

    def _client(self, group: str) -> KafkaConsumer:
        if self._consumer is None or self._consumer_group != group:
            self.close()
            kwargs = {
                **self._config.consumer_kwargs(),
                "group_id": group,
                "enable_auto_commit": False,
            }
            self._consumer = KafkaConsumer(
                **kafka_python_kwargs(kwargs, KafkaConsumer.DEFAULT_CONFIG)
            )
            self._consumer_group = group
        return self._consumer

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close(timeout_ms=1000)
            except Exception:  # closing a broken client must not hide anything
                logger.debug("closing the group-offsets consumer raised", exc_info=True)
