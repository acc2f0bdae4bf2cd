"""The largest record batch a topic takes, so the sink's encoder seldom builds a larger one.

:func:`max_message_bytes` asks the brokers for each topic's effective ``max.message.bytes``
once per process (kept in a :class:`~unaligned.kafka.clients.connections.ProcessMemo`), and
:func:`batch_limit` leaves room for a codec's framing. A lookup the cluster refuses (no
``DescribeConfigs`` permission, an old broker) is logged once and leaves batches bounded by
``batch.size`` and ``max.request.size`` (1 MiB); a batch the broker refuses as too large all
the same is split by :mod:`unaligned.kafka.produce.produce_requests`, and :func:`forget` makes the
next chunk ask again. Fail point ``describe_configs_refused``
(:mod:`unaligned._util.crash_points`) makes every lookup refused, for tests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from unaligned._util import crash_points
from unaligned._util.crash_points import FailPoint
from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import UnalignedError
from unaligned.kafka.clients.admin_clients import shared_admin_client
from unaligned.kafka.clients.connections import SettingsKey, settings_key

logger = logging.getLogger(__name__)

TOPIC_SETTING = "max.message.bytes"
#: Bytes a codec may add to incompressible data, per this many bytes of input (plus a constant):
#: gzip's stored blocks add 5 bytes per 64 KiB, lz4 frames 4 per block, zstd 3 per 128 KiB block,
#: snappy's framing a few per 32 KiB chunk; 1/64 is far above all of them.
_CODEC_ROOM_DIVISOR = 64
_CODEC_ROOM_CONSTANT = 64

_LIMITS: ProcessMemo[tuple[SettingsKey, str], int] = ProcessMemo()
"""(client kwargs, topic) -> the topic's max.message.bytes (known ones only: a lookup that
failed is tried again by the next task; :func:`forget` drops a stale one)."""
_WARNED: ProcessMemo[str, bool] = ProcessMemo()
"""Topics whose failed lookup this process has logged (each is logged once)."""


def _key(client_kwargs: Mapping[str, Any], topic: str) -> tuple[SettingsKey, str]:
    return settings_key(client_kwargs), topic


def max_message_bytes(
    client_kwargs: Mapping[str, Any], topics: Iterable[str]
) -> dict[str, int | None]:
    """Each topic's effective ``max.message.bytes`` (``None``: the cluster would not say).

    Known limits are kept for the life of the process (a topic's limit rarely changes; a query
    restarted after a change asks again); the topics not known yet are asked in one request."""
    wanted = sorted(set(topics))
    missing = [t for t in wanted if _LIMITS.get(_key(client_kwargs, t)) is None]
    found = _describe(client_kwargs, missing) if missing else {}
    for topic, limit in found.items():
        if limit is not None:
            _LIMITS.put(_key(client_kwargs, topic), limit)
    return {t: _LIMITS.get(_key(client_kwargs, t)) for t in wanted}


def forget(client_kwargs: Mapping[str, Any], topics: Iterable[str]) -> None:
    """Drop the known limits of ``topics``: a broker refused a batch within them as too large."""
    for topic in topics:
        _LIMITS.forget(_key(client_kwargs, topic))


def _describe(client_kwargs: Mapping[str, Any], topics: list[str]) -> dict[str, int | None]:
    try:
        refused = FailPoint.DESCRIBE_CONFIGS_REFUSED
        if crash_points.is_armed(refused):
            raise TopicAuthorizationFailedError(
                f"injected by {crash_points.CRASH_AT_ENV}={refused.value}"
            )
        with shared_admin_client(client_kwargs) as admin:
            described = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, t, [TOPIC_SETTING]) for t in topics],
                config_filter="all",
            )
    except (KafkaError, UnalignedError) as exc:
        if [topic for topic in topics if _WARNED.first_time(topic)]:
            logger.warning(
                "could not read %s of topic(s) %s (%r): record batches are bounded by "
                "batch.size and max.request.size only",
                TOPIC_SETTING,
                ", ".join(topics),
                exc,
            )
        return dict.fromkeys(topics)
    by_topic = described.get("topic", {})
    limits: dict[str, int | None] = {}
    for topic in topics:
        value = (by_topic.get(topic, {}).get(TOPIC_SETTING) or {}).get("value")
        limits[topic] = None if value is None else int(value)
    return limits


def batch_limit(limit: int, compression: str) -> int:
    """The uncompressed size an encoded batch must keep within to stay within ``limit`` bytes
    once ``compression`` (``compression.type``; ``"none"``: none) has run over it."""
    if compression == "none":
        return limit
    return limit - limit // _CODEC_ROOM_DIVISOR - _CODEC_ROOM_CONSTANT
