"""What Spark's planner checks of the cluster before each batch's Kafka sink tasks.

:func:`check_cluster` runs in the planner (step 3's precondition, before every micro-batch; what
it learns is kept per process, the cluster's answers being static). It needs no more than the
ACLs Kafka's Java transactional producer needs (docs/guides/acls.md):

1. the transaction timeout is at most the brokers' ``transaction.max.timeout.ms`` (each broker
   asked on its own, one away left out: :func:`unaligned.kafka.transactions.
   transaction_coordinator.broker_max_transaction_timeout_ms`). ``DescribeConfigs`` on a broker
   is authorized on the Cluster, which application principals rarely have: a refusal assumes
   the brokers' documented default (900000 ms) and says so in one warning per process;
2. the ``topic`` option names a topic that exists, that the principal may describe and write
   (``Metadata`` with the topic's authorized operations: a topic it may not describe is not
   called missing; :func:`unaligned.kafka.clients.authorization.check_topic`);
3. the probe (:mod:`unaligned.kafka.transactions.transactional_probe`): ``InitProducerId`` on
   ``<prefix>-probe`` with the sink's timeout, answered as the tasks' will be: a missing
   TransactionalId ``Describe`` or ``Write`` or a timeout above the brokers' maximum refuses
   the query before any task runs, naming the ACL (:class:`KafkaAuthorizationError`) or the
   setting;
4. ``kafka.transaction.two.phase.commit.enable`` against what the brokers support (KIP-939,
   :mod:`unaligned.kafka.transactions.participation`) and what the principal may do (the probe
   again, with ``enable2Pc``: TransactionalId ``TwoPhaseCommit``): ``auto`` takes two-phase
   commit where both allow it and says once why not otherwise, ``true`` refuses, naming what is
   missing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kafka.errors as kafka_errors

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import KafkaAuthorizationError, SinkConfigurationError, TopicNotFoundError
from unaligned.kafka.clients import admin_clients, authorization
from unaligned.kafka.clients.authorization import (
    CLUSTER,
    TRANSACTIONAL_ID,
    RequestRefused,
    Resource,
)
from unaligned.kafka.clients.connections import SettingsKey, describe_servers, settings_key
from unaligned.kafka.transactions import transaction_coordinator, transactional_probe
from unaligned.kafka.transactions.participation import (
    TwoPhaseSupport,
    two_phase_commit_support,
)
from unaligned.sink.kafka_target import KafkaTarget, TwoPhaseCommitMode

logger = logging.getLogger(__name__)

#: Kafka's default ``transaction.max.timeout.ms``, assumed when the brokers will not say.
DEFAULT_MAX_TIMEOUT_MS = 900_000


def check_cluster(target: KafkaTarget, kwargs: Mapping[str, Any], prefix: str) -> bool:
    """Steps 1-4 (module docstring) for the sink's transactional-id ``prefix``; returns whether
    the batch's transactions take part in two-phase commit. Raises
    :class:`SinkConfigurationError`, :class:`TopicNotFoundError`,
    :class:`KafkaAuthorizationError`."""
    broker_max = broker_max_transaction_timeout_ms(kwargs)
    if target.transaction_timeout_ms > broker_max:
        raise SinkConfigurationError(
            f"option 'kafka.transaction.timeout.ms' = {target.transaction_timeout_ms} is "
            f"above the brokers' transaction.max.timeout.ms={broker_max} on "
            f"{target.bootstrap_servers}: lower the option or raise the broker setting"
        )
    if target.topic is not None:
        require_topic(kwargs, target.topic, target.bootstrap_servers)
    _probe(target, kwargs, prefix)
    return _two_phase_commit(target, kwargs, prefix)


_BROKER_MAX_TIMEOUT_MS: ProcessMemo[SettingsKey, int] = ProcessMemo()
"""The brokers' transaction.max.timeout.ms by client kwargs: the check runs before every
micro-batch (see unaligned.sink.writer_role.writer_role) and the value is static."""
_UNREAD_SAID: ProcessMemo[tuple[str, str], bool] = ProcessMemo()
"""(servers, principal) whose refused DescribeConfigs this process has warned about."""


def broker_max_transaction_timeout_ms(kwargs: Mapping[str, Any]) -> int:
    """The brokers' ``transaction.max.timeout.ms``, or :data:`DEFAULT_MAX_TIMEOUT_MS` when
    they refuse ``DescribeConfigs`` (one warning per process and settings)."""

    def ask() -> int:
        try:
            return transaction_coordinator.broker_max_transaction_timeout_ms(kwargs)
        except authorization.AUTHORIZATION_ERRORS:
            _say_unread(kwargs)
            return DEFAULT_MAX_TIMEOUT_MS

    return _BROKER_MAX_TIMEOUT_MS.get_or_compute(settings_key(kwargs), ask)


def _say_unread(kwargs: Mapping[str, Any]) -> None:
    if not _UNREAD_SAID.first_time((describe_servers(kwargs), authorization.principal(kwargs))):
        return
    grant = authorization.grant_command(kwargs, Resource(CLUSTER), ["DescribeConfigs"])
    logger.warning(
        "the brokers at %s refused DescribeConfigs (principal %s has no DescribeConfigs on the "
        "Cluster, which Kafka's transactional producer does not need): assuming Kafka's default "
        "transaction.max.timeout.ms=%d; the sink's InitProducerId probe checks the transaction "
        "timeout and two-phase commit instead. To let the sink read the settings: %s",
        describe_servers(kwargs),
        authorization.principal(kwargs),
        DEFAULT_MAX_TIMEOUT_MS,
        grant,
    )


_PROBED: ProcessMemo[tuple[SettingsKey, str, int, bool], bool] = ProcessMemo()
"""Probes that passed (a refused one is asked again by the next batch's planner)."""


def _probe_refusal(
    target: KafkaTarget, kwargs: Mapping[str, Any], prefix: str, two_phase_commit: bool
) -> RequestRefused | None:
    """The probe (module docstring, step 3): the refusal of a permission, ``None`` if it
    passed; a timeout above the brokers' maximum raises :class:`SinkConfigurationError`."""
    tid = transactional_probe.probe_id(prefix)
    key = (settings_key(kwargs), tid, target.transaction_timeout_ms, two_phase_commit)
    if _PROBED.get(key):
        return None
    try:
        transactional_probe.probe(kwargs, tid, target.transaction_timeout_ms, two_phase_commit)
    except RequestRefused as refusal:
        return refusal
    except kafka_errors.InvalidTransactionTimeoutError:
        raise SinkConfigurationError(
            f"option 'kafka.transaction.timeout.ms' = {target.transaction_timeout_ms} is above "
            f"the brokers' transaction.max.timeout.ms on {target.bootstrap_servers} (they "
            f"refused InitProducerId on {tid!r} with INVALID_TRANSACTION_TIMEOUT): lower the "
            "option or raise the broker setting"
        ) from None
    _PROBED.put(key, True)
    return None


def _probe(target: KafkaTarget, kwargs: Mapping[str, Any], prefix: str) -> None:
    refusal = _probe_refusal(target, kwargs, prefix, two_phase_commit=False)
    if refusal is not None:
        raise _worded(refusal, kwargs, prefix)


def _worded(
    refusal: RequestRefused, kwargs: Mapping[str, Any], prefix: str
) -> KafkaAuthorizationError:
    """The refusal as the user sees it: the ACL granted on the sink's prefix (PREFIXED)."""
    return authorization.explained(
        refusal, kwargs, Resource(TRANSACTIONAL_ID, prefix, prefixed=True)
    )


_TWO_PHASE_SUPPORT: ProcessMemo[SettingsKey, TwoPhaseSupport] = ProcessMemo()
"""What the brokers answered about two-phase commit, by client kwargs (asked once per planner
process: the check runs before every micro-batch)."""
_TWO_PHASE_SAID: ProcessMemo[SettingsKey, bool] = ProcessMemo()
_TWO_PHASE_PROBED: ProcessMemo[tuple[SettingsKey, str], tuple[RequestRefused | None]] = (
    ProcessMemo()
)
"""The probe with ``enable2Pc`` by client kwargs and prefix: asked once per planner process,
its refusal too (``auto`` then runs without two-phase commit in every batch of the process)."""


def _two_phase_commit(target: KafkaTarget, kwargs: Mapping[str, Any], prefix: str) -> bool:
    """``kafka.transaction.two.phase.commit.enable`` resolved against the brokers and the
    principal's ACLs (KIP-939): ``auto`` takes it where both allow it and says once why not
    otherwise; ``true`` refuses a cluster or principal without it, naming what is missing."""
    mode = target.two_phase_commit
    if mode is TwoPhaseCommitMode.OFF:
        return False
    support = _TWO_PHASE_SUPPORT.get_or_compute(
        settings_key(kwargs), lambda: two_phase_commit_support(kwargs)
    )
    if not support.supported:
        missing = "; ".join(support.missing)
        if mode is TwoPhaseCommitMode.ON:
            raise SinkConfigurationError(
                f"option 'kafka.transaction.two.phase.commit.enable' = true, but the brokers at "
                f"{target.bootstrap_servers} do not support two-phase commit (KIP-939): "
                f"{missing}. Set it on the brokers, or use 'auto' or 'false'"
            )
        _say_off(kwargs, missing)
        return False
    key = (settings_key(kwargs), prefix)
    (refusal,) = _TWO_PHASE_PROBED.get_or_compute(
        key, lambda: (_probe_refusal(target, kwargs, prefix, two_phase_commit=True),)
    )
    if refusal is None:
        return True
    worded = _worded(refusal, kwargs, prefix)
    if mode is TwoPhaseCommitMode.ON:
        raise KafkaAuthorizationError(
            f"option 'kafka.transaction.two.phase.commit.enable' = true, but {worded}; or use "
            "'auto' or 'false'"
        )
    _say_off(kwargs, str(worded))
    return False


def _say_off(kwargs: Mapping[str, Any], why: str) -> None:
    if _TWO_PHASE_SAID.first_time(settings_key(kwargs)):
        logger.info(
            "two-phase commit (KIP-939) is off: %s. A batch decided before an outage longer than "
            "kafka.transaction.timeout.ms is aborted by the broker",
            why,
        )


_TOPICS_FOUND: ProcessMemo[tuple[SettingsKey, str], bool] = ProcessMemo()
"""Topics already found (the check runs before every micro-batch; a missing one is asked
again)."""


def require_topic(kwargs: Mapping[str, Any], topic: str, servers: str) -> None:
    """Raise :class:`TopicNotFoundError` unless ``topic`` exists, and
    :class:`KafkaAuthorizationError` unless the principal may describe and write it (found once
    per process)."""
    key = (settings_key(kwargs), topic)
    if _TOPICS_FOUND.get(key):
        return
    try:
        admin_clients.ask_admin(
            kwargs,
            f"looking up topic {topic!r}",
            lambda admin: authorization.check_topic(admin, topic, ["Write"]),
        )
    except TopicNotFoundError:
        raise TopicNotFoundError(
            f"Kafka sink option 'topic' = {topic!r}: no such topic on {servers}"
        ) from None
    except RequestRefused as refusal:
        raise authorization.explained(refusal, kwargs) from None
    _TOPICS_FOUND.put(key, True)
