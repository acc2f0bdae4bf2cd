"""Which topic-partitions a Kafka source query reads: discovery on the driver.

The stream reader (:class:`~unaligned.source.stream_reader.KafkaStreamReader`) asks for the
partitions its subscription (``subscribe``, ``subscribePattern`` or ``assign``) covers before it
resolves the starting position, on every ``latestOffset``, for the ``Trigger.AvailableNow``
target, and when it plans a batch. Everything here is a function of the
:class:`~unaligned.source.options.SourceOptions` and an
:class:`~unaligned.kafka.clients.offset_lookup.OffsetLookup` passed in; nothing is kept between
calls.

A topic (or assigned partition) that does not exist and was never read raises
:class:`~unaligned.errors.TopicNotFoundError` once ``fetchOffset.numRetries`` lookups
``fetchOffset.retryIntervalMs`` apart did not find it, as Spark does.

A known partition is lost only when the broker says so: one listing of every topic can leave
out a topic that exists (a broker with stale metadata). A known topic or partition that a
listing leaves out is confirmed with a direct metadata request for its topic
(:meth:`unaligned.kafka.clients.offset_lookup.OffsetLookup.confirm_topics`):
UNKNOWN_TOPIC_OR_PARTITION, or the topic without that partition, means deleted; any other answer
keeps the partition at its last known position. A partition therefore never drops out of the
offsets, and never comes back as new from its earliest offset, because of one flaky refresh.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping

from unaligned.errors import TopicNotFoundError
from unaligned.kafka.clients.offset_lookup import OffsetLookup
from unaligned.kafka.partitions import TopicPartitionId, format_partitions
from unaligned.source.options import (
    Assign,
    SourceOptions,
    Subscribe,
    SubscribePattern,
    Subscription,
)

logger = logging.getLogger(__name__)


def covered(
    sub: Subscription, topics: Mapping[str, list[int]], known: Collection[TopicPartitionId]
) -> tuple[list[TopicPartitionId], str | None]:
    """(partitions the subscription covers in ``topics``, what is missing or None). Only
    topics and partitions never read (not in ``known``) count as missing."""
    if isinstance(sub, SubscribePattern):
        matching = [t for t in sorted(topics) if sub.matches(t)]
        return [TopicPartitionId(t, p) for t in matching for p in topics[t]], None
    if isinstance(sub, Subscribe):
        listed = [TopicPartitionId(t, p) for t in sub.topics if t in topics for p in topics[t]]
        seen = {tp.topic for tp in known}
        missing = [t for t in sub.topics if t not in topics and t not in seen]
        return listed, (
            f"topic(s) {', '.join(missing)} named by option 'subscribe'" if missing else None
        )
    assert isinstance(sub, Assign)
    listed = [tp for tp in sub.partitions if tp.partition in topics.get(tp.topic, ())]
    absent = [tp for tp in sub.partitions if tp not in listed and tp not in known]
    if not absent:
        return listed, None
    no_topic = sorted({tp.topic for tp in absent if tp.topic not in topics})
    if no_topic:
        return listed, f"topic(s) {', '.join(no_topic)} named by option 'assign'"
    return listed, f"partition(s) {format_partitions(absent)} named by option 'assign'"


def named_topics(sub: Subscription) -> tuple[str, ...] | None:
    """The topics a subscription names (``Metadata`` asks for these only); ``None`` for a
    pattern, whose matches only a listing of every topic finds."""
    if isinstance(sub, SubscribePattern):
        return None
    if isinstance(sub, Subscribe):
        return sub.topics
    return tuple(sorted({tp.topic for tp in sub.partitions}))


def subscribed(sub: Subscription, tp: TopicPartitionId) -> bool:
    """Whether the subscription names ``tp`` (its topic, for subscribe / subscribePattern)."""
    if isinstance(sub, SubscribePattern):
        return sub.matches(tp.topic)
    if isinstance(sub, Subscribe):
        return tp.topic in sub.topics
    assert isinstance(sub, Assign)
    return tp in sub.partitions


def confirmed_gone(
    lookup: OffsetLookup, unlisted: Collection[TopicPartitionId]
) -> set[TopicPartitionId]:
    """Of known partitions a listing of every topic left out, those the broker confirms
    deleted: a direct metadata request for their topic answers UNKNOWN_TOPIC_OR_PARTITION,
    or the topic exists without the partition (recreated with fewer). Every other partition
    (the topic exists, or no clear answer) is kept at its last known position."""
    if not unlisted:
        return set()
    described = lookup.confirm_topics({tp.topic for tp in unlisted})
    gone = set()
    for tp in unlisted:
        if tp.topic not in described:
            continue
        partitions = described[tp.topic]
        if partitions is None or tp.partition not in partitions:
            gone.add(tp)
    kept = set(unlisted) - gone
    if kept:
        logger.warning(
            "a metadata refresh left out %s, but the broker still has them: kept at their "
            "last known positions",
            format_partitions(kept),
        )
    if gone:
        logger.warning("the broker confirms %s deleted", format_partitions(gone))
    return gone


def discover(
    options: SourceOptions,
    lookup: OffsetLookup,
    known: Collection[TopicPartitionId],
    strict: bool = True,
) -> list[TopicPartitionId]:
    """The partitions the subscription covers now, sorted. A topic (or assigned partition)
    that does not exist and was never read raises TopicNotFoundError once
    ``fetchOffset.numRetries`` lookups ``fetchOffset.retryIntervalMs`` apart did not find it
    (as Spark does; with ``strict=False`` it is only logged). One read before (in
    ``known``) that the listing leaves out stays unless the broker confirms it deleted
    (:func:`confirmed_gone`); planning reports those lost."""
    attempts = options.fetch_offset_num_retries
    for attempt in range(1, attempts + 1):
        listing = lookup.topics(named_topics(options.subscription))
        found, missing = covered(options.subscription, listing, known)
        if missing is None or attempt == attempts:
            break
        time.sleep(options.fetch_offset_retry_interval_ms / 1000.0)
    if missing is not None:
        message = f"{missing} do(es) not exist on Kafka at {options.kafka.bootstrap_servers}"
        if strict:
            raise TopicNotFoundError(message)
        logger.warning("%s; reading the partitions that exist", message)
    listed = set(found)
    unlisted = [tp for tp in known if tp not in listed and subscribed(options.subscription, tp)]
    return sorted(listed | (set(unlisted) - confirmed_gone(lookup, unlisted)))


def latest_positions(
    options: SourceOptions, lookup: OffsetLookup, known: Mapping[TopicPartitionId, int]
) -> dict[TopicPartitionId, int]:
    """Latest offsets (last stable offsets with read_committed) of the current partitions,
    re-fetched (fetchOffset.numRetries) while one is below a known position: a stale
    leader can answer with an old end offset (KAFKA-7703, as Spark handles it)."""
    tps = discover(options, lookup, known)
    latest = lookup.latest(tps)
    for _ in range(1, options.fetch_offset_num_retries):
        behind = [tp for tp, off in latest.items() if off < known.get(tp, off)]
        if not behind:
            break
        logger.warning(
            "latest offsets of %s are below the query's positions; fetching again",
            format_partitions(behind),
        )
        time.sleep(options.fetch_offset_retry_interval_ms / 1000.0)
        latest = lookup.latest(tps)
    return latest
