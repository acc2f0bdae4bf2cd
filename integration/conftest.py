"""Shared fixtures for the end-to-end tests: one real Kafka broker and one Spark session per
test session, a factory for fresh topics, and the secured broker (TLS, SASL, OAuth listeners:
secured_cluster.py), started only by the tests that ask for it."""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

# Spark's Python workers run PYSPARK_PYTHON, not the interpreter that made the session.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from unaligned.testing import EmbeddedKafka  # noqa: E402
from unaligned.testing.broker_config import TWO_PHASE_COMMIT  # noqa: E402
from unaligned.testing.registry_server import RegistryServer  # noqa: E402


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    """A single-node KRaft broker on a loopback port, transactions enabled, with two-phase
    commit participation (KIP-939): the sink's default takes it, so every sink test here runs
    with it (the three-node cluster of test_broker_failover.py and test_two_phase_commit_
    participation.py's second broker run without it)."""
    with EmbeddedKafka(
        data_dir=tmp_path_factory.mktemp("kafka"), broker_properties=TWO_PHASE_COMMIT
    ) as broker:
        yield broker


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """One Schema Registry (Apicurio, Confluent's API; basic auth) for the session's tests."""
    with RegistryServer(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker with SSL, mutual TLS, SASL_SSL (PLAIN, SCRAM-SHA-512) and OAUTHBEARER
    listeners, shared by every test of the secured listeners (:mod:`secured_cluster`)."""
    from secured_cluster import secured_cluster

    with secured_cluster(tmp_path_factory.mktemp("secured")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A local Spark session shared by every test that runs queries in-process."""
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("unaligned-integration")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


TopicFactory = Callable[..., str]


# The test files that take longest (minutes of one worker, measured in a full run of
# ./dev test --durations=0), longest first. ``./dev test`` hands whole files to two workers
# in collection order; starting these first keeps one worker from running a long file alone
# at the end while the other is idle.
LONGEST_FIRST = (
    "test_rescaling.py",
    "test_table_sinks.py",
    "test_sink_crash_matrix.py",
    "test_prefix_clashes.py",
    "test_installed_wheel.py",
    "test_unaligned_barriers.py",
    "test_finishing_crashes.py",
    "test_two_phase_commit_participation.py",
    "test_table_sinks_s3.py",
    "test_quick_start.py",
    "test_channel_state_faults.py",
    "test_secrets_in_errors.py",
    "test_kafka_source.py",
    "test_secured_listeners.py",
    "test_demo.py",
    "test_table_sinks_rest.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here needs Spark or the broker: ``-m "not integration"`` leaves them out.
    The files of ``LONGEST_FIRST`` are collected first, in that order; the rest keep theirs."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.integration)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def first(item: pytest.Item) -> int:
        return rank.get(item.path.name, len(rank)) if here in item.path.parents else len(rank)

    items.sort(key=first)  # stable: a file's tests stay together and in their order


@pytest.fixture
def new_topic(kafka: EmbeddedKafka) -> TopicFactory:
    """``new_topic(partitions=4, config={...}) -> name``: a fresh topic with a unique name."""
    counter = itertools.count()

    def make(partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = f"t{next(counter)}-{uuid.uuid4().hex[:10]}"
        kafka.create_topic(name, partitions=partitions, config=config)
        return name

    return make


@pytest.fixture
def client_kwargs(kafka: EmbeddedKafka) -> dict[str, Any]:
    """Producer kwargs for the broker, with a 60 s transaction timeout (the Kafka layer's tests
    below the sink: transactions, their coordinator, the produce session)."""
    return {"bootstrap_servers": kafka.bootstrap_servers, "transaction_timeout_ms": 60_000}


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"
