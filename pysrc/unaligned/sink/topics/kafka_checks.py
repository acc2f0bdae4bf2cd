"""What Spark's planner checks of the cluster before each batch's Kafka sink tasks.

:func:`check_cluster` runs in the planner (step 3's precondition, before every micro-batch; what
it learns is kept per process, the cluster's answers being static):

1. the transaction timeout is at most the brokers' ``transaction.max.timeout.ms`` (each broker
   asked on its own, one away left out: :func:`unaligned.kafka.transactions.transactions.
   transaction_coordinator.broker_max_transaction_timeout_ms`);
2. the ``topic`` option names a topic that exists (a missing one is asked again next time);
3. ``kafka.transaction.two.phase.commit.enable`` against what the brokers support (KIP-939,
   :mod:`unaligned.kafka.transactions.participation`): ``auto`` takes two-phase commit where
   every broker has it and says once why not otherwise, ``true`` refuses a cluster without it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import SinkConfigurationError, TopicNotFoundError
from unaligned.kafka.clients import admin_clients
from unaligned.kafka.clients.connections import SettingsKey, settings_key
from unaligned.kafka.transactions import transaction_coordinator
from unaligned.kafka.transactions.participation import (
    TwoPhaseSupport,
    two_phase_commit_support,
)
from unaligned.sink.kafka_target import KafkaTarget, TwoPhaseCommitMode

logger = logging.getLogger(__name__)


def check_cluster(target: KafkaTarget, kwargs: Mapping[str, Any]) -> bool:
    """Steps 1-3 (module docstring); returns whether the batch's transactions take part in
    two-phase commit. Raises :class:`SinkConfigurationError` / :class:`TopicNotFoundError`."""
    broker_max = broker_max_transaction_timeout_ms(kwargs)
    if target.transaction_timeout_ms > broker_max:
        raise SinkConfigurationError(
            f"option 'kafka.transaction.timeout.ms' = {target.transaction_timeout_ms} is "
            f"above the brokers' transaction.max.timeout.ms={broker_max} on "
            f"{target.bootstrap_servers}: lower the option or raise the broker setting"
        )
    if target.topic is not None:
        require_topic(kwargs, target.topic, target.bootstrap_servers)
    return _two_phase_commit(target, kwargs)


_BROKER_MAX_TIMEOUT_MS: ProcessMemo[SettingsKey, int] = ProcessMemo()
"""The brokers' transaction.max.timeout.ms by client kwargs: the check runs before every
micro-batch (see unaligned.sink.writer_role.writer_role) and the value is static."""


def broker_max_transaction_timeout_ms(kwargs: Mapping[str, Any]) -> int:
    return _BROKER_MAX_TIMEOUT_MS.get_or_compute(
        settings_key(kwargs),
        lambda: transaction_coordinator.broker_max_transaction_timeout_ms(kwargs),
    )


_TWO_PHASE_SUPPORT: ProcessMemo[SettingsKey, TwoPhaseSupport] = ProcessMemo()
"""What the brokers answered about two-phase commit, by client kwargs (asked once per planner
process: the check runs before every micro-batch)."""
_TWO_PHASE_SAID: ProcessMemo[SettingsKey, bool] = ProcessMemo()


def _two_phase_commit(target: KafkaTarget, kwargs: Mapping[str, Any]) -> bool:
    """``kafka.transaction.two.phase.commit.enable`` resolved against the brokers (KIP-939):
    ``auto`` takes it where every broker supports it and says once why not otherwise; ``true``
    refuses a cluster without it, naming what is missing."""
    mode = target.two_phase_commit
    if mode is TwoPhaseCommitMode.OFF:
        return False
    support = _TWO_PHASE_SUPPORT.get_or_compute(
        settings_key(kwargs), lambda: two_phase_commit_support(kwargs)
    )
    if support.supported:
        return True
    missing = "; ".join(support.missing)
    if mode is TwoPhaseCommitMode.ON:
        raise SinkConfigurationError(
            f"option 'kafka.transaction.two.phase.commit.enable' = true, but the brokers at "
            f"{target.bootstrap_servers} do not support two-phase commit (KIP-939): {missing}. "
            "Set it on the brokers, or use 'auto' or 'false'"
        )
    if _TWO_PHASE_SAID.first_time(settings_key(kwargs)):
        logger.info(
            "two-phase commit (KIP-939) is off: %s. A batch decided before an outage longer than "
            "kafka.transaction.timeout.ms is aborted by the broker",
            missing,
        )
    return False


_TOPICS_FOUND: ProcessMemo[tuple[SettingsKey, str], bool] = ProcessMemo()
"""Topics already found (the check runs before every micro-batch; a missing one is asked
again)."""


def require_topic(kwargs: Mapping[str, Any], topic: str, servers: str) -> None:
    """Raise :class:`TopicNotFoundError` unless ``topic`` exists (found once per process)."""
    key = (settings_key(kwargs), topic)
    if _TOPICS_FOUND.get(key):
        return
    topics = set(
        admin_clients.ask_admin(kwargs, "listing topics", lambda admin: admin.list_topics())
    )
    if topic not in topics:
        raise TopicNotFoundError(
            f"Kafka sink option 'topic' = {topic!r}: no such topic on {servers}"
        )
    _TOPICS_FOUND.put(key, True)
