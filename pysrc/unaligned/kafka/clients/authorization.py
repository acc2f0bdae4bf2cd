"""A request the cluster's authorizer refused, in words an operator can act on.

Kafka answers a refused request with an error that names only the kind of resource
(``TOPIC_AUTHORIZATION_FAILED``, ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``,
``GROUP_AUTHORIZATION_FAILED``, ``CLUSTER_AUTHORIZATION_FAILED``); which operation it refused
follows from the request (Apache Kafka 4.4's ``KafkaApis``):

===========================  ==================================================================
request                      refused unless the principal has
===========================  ==================================================================
``FindCoordinator`` (txn)    TransactionalId ``Describe``
``InitProducerId``           TransactionalId ``Write``; with ``enable2Pc`` also
                             TransactionalId ``TwoPhaseCommit`` (and the broker setting
                             ``transaction.two.phase.commit.enable=true``: the same answer)
``AddPartitionsToTxn``       TransactionalId ``Write``; Topic ``Write`` on each partition's topic
``Produce``                  Topic ``Write`` (in a transaction also TransactionalId ``Write``)
``EndTxn``                   TransactionalId ``Write``
``DescribeTransactions``     TransactionalId ``Describe``
``Metadata`` (named topics)  Topic ``Describe`` (a topic the principal may not describe is
                             answered so whether it exists or not)
``Fetch``                    Topic ``Read``
``DescribeConfigs`` (broker) Cluster ``DescribeConfigs``
===========================  ==================================================================

:class:`RequestRefused` is the kafka-python error the request sites raise for a refusal (the
request, the resource, the operations); :func:`explain` and :func:`refused` make the
:class:`~unaligned.errors.KafkaAuthorizationError` the user sees: the request, the resource and
operation, and the ``kafka-acls`` command that grants it (the principal is the SASL user where the
options name one). :func:`check_topic` asks ``Metadata`` whether a topic exists and which
operations the principal may do on it (its authorized operations, KIP-430), without writing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import MetadataRequest

from unaligned.errors import KafkaAuthorizationError, TopicNotFoundError
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.clients.connections import describe_servers

#: kafka-python's errors of a refused request (the broker's ``*_AUTHORIZATION_FAILED``).
AUTHORIZATION_ERRORS = (
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.GroupAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailedError,
)

TOPIC, TRANSACTIONAL_ID, GROUP, CLUSTER = "Topic", "TransactionalId", "Group", "Cluster"
#: Kafka's ``AclOperation`` codes of the operations a topic's authorized operations are
#: checked for (bit ``code`` set: allowed).
OPERATION_CODES = {"Read": 3, "Write": 4, "Describe": 8}
_FLAGS = {
    TOPIC: "--topic",
    TRANSACTIONAL_ID: "--transactional-id",
    GROUP: "--group",
    CLUSTER: "--cluster",
}


@dataclass(frozen=True)
class Resource:
    """An ACL's resource: its type (:data:`TOPIC`, :data:`TRANSACTIONAL_ID`, :data:`GROUP`,
    :data:`CLUSTER`), its name, and whether an ACL on it is a prefix (``PREFIXED``)."""

    type: str
    name: str = ""
    prefixed: bool = False

    def describe(self) -> str:
        if self.type == CLUSTER:
            return "the Cluster resource"
        if self.prefixed:
            return f"{self.type} names starting with {self.name!r}"
        return f"{self.type} {self.name!r}"


def principal(client_kwargs: Mapping[str, Any]) -> str:
    """The principal the client logs in as, where the options say it (a SASL user name);
    ``User:<principal>`` for the operator to fill in otherwise."""
    protocol = str(client_kwargs.get("security_protocol", "PLAINTEXT"))
    user = client_kwargs.get("sasl_plain_username")
    if protocol.startswith("SASL_") and user:
        return f"User:{user}"
    if protocol == "PLAINTEXT":
        return "User:ANONYMOUS"
    return "User:<principal>"


def grant_command(
    client_kwargs: Mapping[str, Any], resource: Resource, operations: Sequence[str]
) -> str:
    """The ``kafka-acls`` command (Kafka's ``bin/kafka-acls.sh``) that grants ``operations``
    on ``resource`` to the client's principal."""
    words = [
        "kafka-acls",
        "--bootstrap-server",
        describe_servers(client_kwargs),
        "--command-config",
        "<admin.properties>",
        "--add",
        "--allow-principal",
        principal(client_kwargs),
    ]
    for operation in operations:
        words += ["--operation", operation]
    words.append(_FLAGS[resource.type])
    if resource.type != CLUSTER:
        words.append(resource.name)
    if resource.prefixed:
        words += ["--resource-pattern-type", "prefixed"]
    return " ".join(words)


class RequestRefused(kafka_errors.AuthorizationError):  # type: ignore[misc]
    """A request the broker refused, with what it refused (raised where the request is sent,
    a kafka-python error like the broker's own, never retried; :func:`explain` words it for
    the user with the client's servers and principal)."""

    def __init__(
        self, request: str, resource: Resource, operations: Sequence[str], note: str = ""
    ) -> None:
        self.request = request
        self.resource = resource
        self.operations = tuple(operations)
        self.note = note
        super().__init__(
            f"{request} refused: the principal lacks {' and '.join(operations)} on "
            f"{resource.describe()}" + (f" ({note})" if note else "")
        )


def explained(
    refusal: RequestRefused, client_kwargs: Mapping[str, Any], grant: Resource | None = None
) -> KafkaAuthorizationError:
    """:func:`explain` of a known refusal."""
    worded = explain(refusal, client_kwargs, grant)
    assert worded is not None
    return worded


def explain(
    error: BaseException, client_kwargs: Mapping[str, Any], grant: Resource | None = None
) -> KafkaAuthorizationError | None:
    """The :class:`KafkaAuthorizationError` of ``error`` if it is a :class:`RequestRefused`
    (``None`` otherwise); ``grant``: the resource the advice grants on (the sink's
    transactional-id prefix), by default the refused one (a transactional id: every id of the
    sink, by its prefix)."""
    if not isinstance(error, RequestRefused):
        return None
    resource = error.resource
    if grant is None and resource.type == TRANSACTIONAL_ID and not resource.prefixed:
        grant = Resource(TRANSACTIONAL_ID, "<transactionalIdPrefix>", prefixed=True)
    return refused(
        client_kwargs, error.request, resource, error.operations, grant=grant, note=error.note
    )


def refused(
    client_kwargs: Mapping[str, Any],
    request: str,
    resource: Resource,
    operations: Sequence[str],
    *,
    grant: Resource | None = None,
    note: str = "",
) -> KafkaAuthorizationError:
    """The error of ``request`` refused for want of ``operations`` on ``resource``; ``grant``:
    the resource the advice grants on (a prefix of the name: the sink's transactional ids),
    ``note``: what else the refusal may mean."""
    needed = " and ".join(operations)
    return KafkaAuthorizationError(
        f"the cluster at {describe_servers(client_kwargs)} refused {request}: principal "
        f"{principal(client_kwargs)} lacks {needed} on {resource.describe()}"
        + (f" ({note})" if note else "")
        + f". Grant it: {grant_command(client_kwargs, grant or resource, operations)}"
    )


def is_refusal(error: BaseException | type) -> bool:
    """Whether ``error`` (an instance or a class) is a broker's authorization refusal."""
    kind = error if isinstance(error, type) else type(error)
    return issubclass(kind, kafka_errors.AuthorizationError)


def check_topic(admin: KafkaAdminClient, topic: str, operations: Sequence[str]) -> None:
    """Ask ``Metadata`` for ``topic`` with the operations the principal may do on it (v8+):
    raise :class:`~unaligned.errors.TopicNotFoundError` if it does not exist,
    :class:`RequestRefused` if the principal may not describe it or lacks one of
    ``operations`` (names of :data:`OPERATION_CODES`), the broker's error otherwise."""
    manager = connection_manager(admin)
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=True,
    )
    response = manager.run(manager.send, request)
    found = next((t for t in response.topics if t.name == topic), None)
    if found is None:
        raise TopicNotFoundError(f"no such topic {topic!r}")
    error = kafka_errors.for_code(int(found.error_code))
    if error is kafka_errors.TopicAuthorizationFailedError:
        raise RequestRefused(
            "Metadata",
            Resource(TOPIC, topic),
            ["Describe"],
            "the broker does not say whether it exists to such a principal",
        )
    if error is kafka_errors.UnknownTopicOrPartitionError:
        raise TopicNotFoundError(f"no such topic {topic!r}")
    if error is not kafka_errors.NoError:
        raise error(f"Metadata of topic {topic!r}")
    allowed = found.authorized_operations  # kafka-python: the set bits' codes, None: not said
    if allowed is None:
        return
    missing = [op for op in operations if OPERATION_CODES[op] not in allowed]
    if missing:
        raise RequestRefused(
            "Metadata (the topic's authorized operations)", Resource(TOPIC, topic), missing
        )
