"""Whether a cluster lets the sink's transactions take part in two-phase commit (KIP-939).

A transaction opened by ``InitProducerId`` v6 with ``enable2Pc`` is never aborted by the
broker's transaction timeout: only a commit or an abort ends it, so a batch decided before an
outage of any length is still committed when the query restarts (the commit record keeps the
transaction's producer id and epoch; the sink ends it by handle, ``EndTxn``, and needs no
``keepPreparedTxn``). A cluster supports it when every broker

1. advertises ``InitProducerId`` v6 (Apache Kafka 4.4.0 marks v6 unstable: a broker advertises
   it only with ``unstable.api.versions.enable=true``), and
2. has ``transaction.two.phase.commit.enable=true`` (with ACLs on, the sink's principal also
   needs the ``TWO_PHASE_COMMIT`` operation on its transactional ids).

:func:`two_phase_commit_support` asks every broker (``ApiVersions``, ``DescribeConfigs``) and
says what is missing (a refused ``DescribeConfigs`` leaves the setting unread: the probe of
:mod:`unaligned.kafka.transactions.transactional_probe` decides); the sink decides from it
(``kafka.transaction.two.phase.commit.enable``:
``auto``, ``true``, ``false``; :mod:`unaligned.sink.topics.kafka_participant`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import ApiVersionsRequest

from unaligned.kafka.clients.admin_clients import ask_admin, ask_each_broker, broker_setting
from unaligned.kafka.clients.authorization import AUTHORIZATION_ERRORS
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.transactions.coordinator_requests import INIT_PRODUCER_ID_2PC_VERSION

BROKER_SETTING = "transaction.two.phase.commit.enable"
_INIT_PRODUCER_ID_KEY = 22


@dataclass(frozen=True)
class TwoPhaseSupport:
    """What the brokers answered: ``missing`` says why not, empty when every broker supports
    two-phase commit; ``unread``: a broker refused ``DescribeConfigs`` (no Cluster
    ``DescribeConfigs``), so its setting is not known (the ``InitProducerId`` probe with
    ``enable2Pc`` decides: :mod:`unaligned.kafka.transactions.transactional_probe`)."""

    missing: tuple[str, ...]
    unread: bool = False

    @property
    def supported(self) -> bool:
        return not self.missing


def two_phase_commit_support(client_kwargs: Mapping[str, Any]) -> TwoPhaseSupport:
    """Ask every live broker (module docstring, steps 1 and 2); a broker away is left out as
    long as one answers."""
    return ask_admin(client_kwargs, "asking the brokers about two-phase commit", _ask)


def _ask(admin: KafkaAdminClient) -> TwoPhaseSupport:
    manager = connection_manager(admin)

    def broker(node: int) -> tuple[int, str | None, bool]:
        version = manager.run(_init_producer_id_version, manager, node)
        try:
            return version, broker_setting(admin, node, BROKER_SETTING), False
        except AUTHORIZATION_ERRORS:
            return version, None, True

    missing: list[str] = []
    answers = ask_each_broker(admin, broker)
    for node, (version, setting, unread) in sorted(answers.items()):
        if version < INIT_PRODUCER_ID_2PC_VERSION:
            missing.append(
                f"broker {node} answers InitProducerId up to v{version}, not "
                f"v{INIT_PRODUCER_ID_2PC_VERSION} (Kafka 4.4.0 advertises it only with "
                "unstable.api.versions.enable=true)"
            )
        if not unread and str(setting or "false").lower() != "true":
            missing.append(f"broker {node} has {BROKER_SETTING}={setting or 'false'}")
    return TwoPhaseSupport(tuple(missing), any(unread for _, _, unread in answers.values()))


async def _init_producer_id_version(manager: Any, node: int) -> int:
    """The highest ``InitProducerId`` version ``node`` advertises (-1: none)."""
    response = await manager.send(
        ApiVersionsRequest(
            client_software_name="unaligned", client_software_version="1", max_version=3
        ),
        node_id=node,
    )
    for api in response.api_keys:
        if int(api.api_key) == _INIT_PRODUCER_ID_KEY:
            return int(api.max_version)
    return -1
