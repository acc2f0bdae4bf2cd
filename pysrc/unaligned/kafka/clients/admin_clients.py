"""Kafka admin clients: one per call, or one kept per process for the questions asked per batch.

:func:`admin_client` builds a ``KafkaAdminClient`` for one block and closes it after: for a
block that runs while the kept client is lent to another thread.

:func:`shared_admin_client` lends the process's kept client for the same cluster and settings
instead. An executor's Python worker runs many tasks one after another, and every Kafka sink
task asks the coordinator about its transactional id before it begins (``DescribeTransactions``,
:mod:`unaligned.sink.topics.kafka_participant`); Spark reuses the driver's planner and commit runner
processes across micro-batches, which list the sink's open transactions and commit the batch's
(``ListTransactions``, ``EndTxn``) every batch; the planner also asks, once per process, for
the brokers' ``transaction.max.timeout.ms`` and whether the sink's topic exists. A new client
per call costs its bootstrap, connections and their ``ApiVersions`` exchange, about as much
time as the question itself (about 10 ms each on the embedded broker). Guarantees:

- a client is lent to one block at a time: a second thread asking while it is lent gets a client
  of its own for its block (closed after), never a shared one;
- a client is never used in another process than the one that built it (a forked child builds
  its own; the parent's I/O thread does not exist there);
- a block that raises drops the kept client (closed): a client whose connections failed is not
  lent again, and the next block builds a new one. Answers are never cached, only the client.

:func:`warm_admin_client` builds the kept client ahead of the first block that needs it (a sink
task does, on a thread of its own, while its first rows are on their way).

:func:`ask_admin` asks a question on the kept client through a lost broker or a moved
coordinator: a retriable error drops the client (its metadata and cached coordinators are
stale) and the question is asked again on a new one, with a doubling backoff, until
``kafka.default.api.timeout.ms`` (:func:`unaligned.kafka.clients.retries.call_until`).
:func:`ask_each_broker` asks every live broker, leaving out one that is away, and
:func:`broker_setting` reads one broker's setting (a refusal raised, never read as a missing value).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.protocol.admin import DescribeConfigsRequest

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.clients.client_internals import connection_manager
from unaligned.kafka.clients.client_options import api_timeout_ms, kafka_python_kwargs
from unaligned.kafka.clients.connections import SettingsKey, describe_servers, settings_key
from unaligned.kafka.clients.retries import Backoff, call_until, is_retriable
from unaligned.kafka.clients.socket_login import explain_bootstrap_failure
from unaligned.kafka.login.client_login import LOGIN_KWARGS

T = TypeVar("T")


@dataclass(frozen=True)
class _Kept:
    client: KafkaAdminClient
    pid: int
    lock: threading.Lock


_KEPT: ProcessMemo[SettingsKey, _Kept] = ProcessMemo()
_KEPT_LOCK = threading.Lock()  # lend and drop: a look-up and a change as one step


def admin_client_kwargs(client_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The producer kwargs a ``KafkaAdminClient`` accepts (it rejects unknown keys), with the
    login settings (made into login material when the client is built)."""
    accepted = KafkaAdminClient.DEFAULT_CONFIG
    return {k: v for k, v in client_kwargs.items() if k in accepted or k in LOGIN_KWARGS}


def _build(client_kwargs: Mapping[str, Any], max_in_flight: int | None) -> KafkaAdminClient:
    kwargs = kafka_python_kwargs(client_kwargs, KafkaAdminClient.DEFAULT_CONFIG)
    if max_in_flight is not None:
        kwargs["max_in_flight_requests_per_connection"] = max_in_flight
    try:
        return KafkaAdminClient(**kwargs)
    except kafka_errors.KafkaTimeoutError as exc:
        explain_bootstrap_failure(client_kwargs, _request_timeout_s(client_kwargs))
        raise KafkaUnavailableError(
            f"could not reach Kafka at {describe_servers(client_kwargs)}: {exc!r}"
        ) from exc


def _request_timeout_s(client_kwargs: Mapping[str, Any]) -> float:
    return int(client_kwargs.get("request_timeout_ms", 30_000)) / 1000


@contextmanager
def admin_client(
    client_kwargs: Mapping[str, Any], *, max_in_flight: int | None = None
) -> Iterator[KafkaAdminClient]:
    """A new admin client for the block, closed after it; bootstrap failing raises
    :class:`KafkaUnavailableError` naming the bootstrap servers, or
    :class:`~unaligned.errors.KafkaAuthenticationError` when the brokers refused the login."""
    admin = _build(client_kwargs, max_in_flight)
    try:
        yield admin
    finally:
        admin.close()


@contextmanager
def shared_admin_client(
    client_kwargs: Mapping[str, Any], *, max_in_flight: int | None = None
) -> Iterator[KafkaAdminClient]:
    """The process's kept admin client for ``client_kwargs`` (and ``max_in_flight`` requests per
    connection, the admin's default if ``None``), lent for the block (see the module docstring
    for who gets which client)."""
    key = settings_key({**admin_client_kwargs(client_kwargs), "max_in_flight": max_in_flight})
    kept = _lend(key, client_kwargs, max_in_flight)
    if kept is None:  # lent to another thread now: a client of the block's own
        with admin_client(client_kwargs, max_in_flight=max_in_flight) as admin:
            yield admin
        return
    try:
        yield kept.client
    except BaseException:
        _drop(key, kept)
        raise
    kept.lock.release()


def warm_admin_client(
    client_kwargs: Mapping[str, Any], *, max_in_flight: int | None = None
) -> None:
    """Build the process's kept client for these settings if it has none (its bootstrap,
    connection and ``ApiVersions``), and lend it to no one: a thread asking meanwhile waits
    for the build and gets the kept client, not one of its own."""
    key = settings_key({**admin_client_kwargs(client_kwargs), "max_in_flight": max_in_flight})
    kept = _lend(key, client_kwargs, max_in_flight)
    if kept is not None:
        kept.lock.release()


def _lend(
    key: SettingsKey, client_kwargs: Mapping[str, Any], max_in_flight: int | None
) -> _Kept | None:
    """The kept client for ``key``, locked for the caller (built if this process has none);
    ``None`` if another thread has it."""
    with _KEPT_LOCK:
        kept = _KEPT.get(key)
        if kept is not None and kept.pid != os.getpid():
            _KEPT.forget(key)  # built before a fork: its I/O thread is not in this process
            kept = None
        if kept is None:
            kept = _Kept(_build(client_kwargs, max_in_flight), os.getpid(), threading.Lock())
            _KEPT.put(key, kept)
        return kept if kept.lock.acquire(blocking=False) else None


def _drop(key: SettingsKey, kept: _Kept) -> None:
    with _KEPT_LOCK:
        if _KEPT.get(key) is kept:
            _KEPT.forget(key)
    kept.lock.release()
    kept.client.close()


def ask_admin(
    client_kwargs: Mapping[str, Any],
    doing: str,
    question: Callable[[KafkaAdminClient], T],
    *,
    timeout_ms: int | None = None,
) -> T:
    """``question(admin)`` on the process's kept admin client, asked again on a new client
    after each retriable error until ``timeout_ms`` (default ``kafka.default.api.timeout.ms``)
    has passed; then :class:`KafkaUnavailableError` naming ``doing`` (module docstring)."""

    def attempt(_deadline: float) -> T:
        with shared_admin_client(client_kwargs) as admin:
            return question(admin)

    return call_until(
        attempt,
        doing=doing,
        servers=describe_servers(client_kwargs),
        timeout_ms=api_timeout_ms(client_kwargs) if timeout_ms is None else timeout_ms,
        backoff=Backoff(int(client_kwargs.get("retry_backoff_ms", 100)) / 1000),
    )


def ask_each_broker(admin: KafkaAdminClient, question: Callable[[int], T]) -> dict[int, T]:
    """``question(node id)`` for every broker the admin client's metadata lists; a broker that
    is away (a retriable error: killed, restarting) is left out as long as one answers, else its
    error is raised (:func:`ask_admin` then asks again on a new client)."""
    answers: dict[int, T] = {}
    away: BaseException | None = None
    for broker in connection_manager(admin).cluster.brokers():
        node = int(broker.node_id)
        try:
            answers[node] = question(node)
        except kafka_errors.KafkaError as exc:
            if not is_retriable(exc):
                raise
            away = exc
    if not answers and away is not None:
        raise away
    return answers


def broker_setting(admin: KafkaAdminClient, node: int, name: str) -> str | None:
    """Broker ``node``'s value of setting ``name`` (``None`` when it reports none).

    The broker's error for the resource is raised as kafka-python's error type: a principal
    without ``DescribeConfigs`` on the Cluster gets ``ClusterAuthorizationFailedError`` (never
    read as a missing value; kafka-python's ``describe_configs`` drops the error)."""
    manager = connection_manager(admin)
    request = DescribeConfigsRequest(
        resources=[(int(ConfigResourceType.BROKER), str(node), [name])], include_synonyms=False
    )
    response = manager.run(_send_to, manager, request, node)
    for result in response.results:
        error = kafka_errors.for_code(int(result.error_code))
        if error is not kafka_errors.NoError:
            raise error(f"DescribeConfigs of broker {node}: {result.error_message or ''}".strip())
        for config in result.configs:
            if config.name == name:
                return None if config.value is None else str(config.value)
    return None


async def _send_to(manager: Any, request: Any, node: int) -> Any:
    return await manager.send(request, node_id=node)
