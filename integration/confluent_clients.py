"""What the tests with Confluent's own client share: the registry front as fixtures, Confluent's
registry client, and a query that copies one topic's ``value`` to another with our source and
sink."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

from confluent_front import ConfluentFront
from test_registry_formats import _run_to_end
from unaligned.testing import EmbeddedKafka
from unaligned.testing.registry_server import RegistryServer


@pytest.fixture(scope="module")
def front(registry: RegistryServer) -> Iterator[ConfluentFront]:
    with ConfluentFront(registry) as served:
        yield served


@pytest.fixture(scope="module")
def confluent(front: ConfluentFront) -> SchemaRegistryClient:
    return SchemaRegistryClient(front.confluent_conf())


def value_context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


#: Confluent's header of a value's schema id (``confluent_kafka.schema_registry``, private there).
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"


def id_header_serializer(payload: bytes, ctx: Any, schema_id: Any) -> bytes:
    """Confluent's header form (``header_schema_id_serializer``: the payload bare, the schema in
    header ``__value_schema_id``) with the id layout of Confluent's ``SchemaId`` (magic byte 0,
    the id, Protobuf's message indexes) instead of the GUID (magic byte 1), which the test
    kit's registry does not give."""
    ctx.headers.append((VALUE_SCHEMA_ID_HEADER, schema_id.id_to_bytes()))
    return payload


def header_context(topic: str) -> SerializationContext:
    """A value's context with headers for the serializer to add to."""
    return SerializationContext(topic, MessageField.VALUE, [])


def produce(kafka: EmbeddedKafka, topic: str, values: list[bytes]) -> None:
    kafka.produce(topic, [(0, str(i).encode(), v, None, None) for i, v in enumerate(values)])


def read(
    spark: Any, kafka: EmbeddedKafka, front: ConfluentFront, topic: str, **options: str
) -> Any:
    reader = (
        spark.read.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .options(**front.options())
    )
    return reader.options(**options).load()


def copy(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    source: str,
    out: str,
    checkpoint: Path,
    read_options: dict[str, str],
    write_options: dict[str, str],
) -> None:
    """A query: ``source`` read by our source, its ``value`` written to ``out`` by our sink."""
    stream = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .options(**front.options(), **read_options)
        .load()
        .select("key", "value")
    )
    _run_to_end(
        stream.writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", out)
        .options(**front.options(), **write_options),
        checkpoint,
    )


def utc(value: Any) -> Any:
    """A timestamp Spark returned (naive, session time zone) as an aware UTC datetime."""
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.astimezone(datetime.timezone.utc)
    return value
