"""Schema Registry formats end to end: a real registry (Apicurio, Confluent's API, basic auth),
the embedded broker and Spark. Records are written by a Confluent-style serializer (fastavro
behind the 5-byte header) or by the sink, and read back by the source."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
from typing import Any

import fastavro
import pytest

from unaligned.registry.client import RegistryClient
from unaligned.registry.options import parse_formats
from unaligned.testing import EmbeddedKafka
from unaligned.testing.registry_server import RegistryServer


def registry_client(registry: RegistryServer) -> RegistryClient:
    options = {k.lower(): v for k, v in registry.options().items()}
    formats = parse_formats({"valueformat": "avro-confluent", **options}, sink=False)
    assert formats is not None
    return RegistryClient(formats.registry)


def confluent_avro(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(b"\0" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def batch_read(spark: Any, kafka: EmbeddedKafka, registry: RegistryServer, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("valueFormat", "avro-confluent")
    )
    for key, value in {**registry.options(), **options}.items():
        reader = reader.option(key, value)
    return reader.load()


ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": ["null", "int"], "default": None},
    ],
}
V1 = {
    "type": "record",
    "name": "Customer",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string", "default": "anonymous"},
        {"name": "joined", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "birthday", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {
            "name": "balance",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["FREE", "GOLD"]}},
        {"name": "address", "type": ADDRESS},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [f for f in V2["fields"] if f["name"] != "name"]}


def customer(i: int, version: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": i,
        "name": f"customer {i}",
        "joined": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(seconds=i),
        "birthday": None if i % 2 else datetime.date(1990, 1, 1) + datetime.timedelta(days=i),
        "balance": decimal.Decimal(i * 1001) / 100,
        "tier": "GOLD" if i % 3 == 0 else "FREE",
        "address": {"city": f"city {i}", "zip": None if i % 4 == 0 else 10000 + i},
        "tags": [f"t{j}" for j in range(i % 3)],
        "scores": {f"s{j}": j / 2 for j in range(i % 2 + 1)},
    }
    if version >= 2:
        record["email"] = f"c{i}@example.com"
    if version == 3:
        del record["name"]
    return record


def test_avro_across_writer_ids_with_nested_and_logical_types(
    spark: Any, kafka: EmbeddedKafka, registry: RegistryServer, new_topic: Any
) -> None:
    topic = new_topic(partitions=2)
    client = registry_client(registry)
    subject = f"{topic}-value"
    ids = [client.register(subject, json.dumps(s), "AVRO") for s in (V1, V2, V3)]
    records = [(i, v) for v in (1, 2, 3) for i in range(v * 100, v * 100 + 20)]
    kafka.produce(
        topic,
        [
            (i % 2, str(i).encode(), confluent_avro(ids[v - 1], (V1, V2, V3)[v - 1], customer(i, v)), None, None)
            for i, v in records
        ],
    )
    # reader: version 2 (has name with a default, and email): v1 gets the email default, v3
    # the name default
    rows = batch_read(spark, kafka, registry, topic, valueSchemaVersion="2").collect()
    assert len(rows) == len(records)
    by_id = {row.value.id: row for row in rows}
    for i, v in records:
        row = by_id[i]
        expected = customer(i, v)
        assert row.valueSchemaId == ids[v - 1]
        value = row.value.asDict(recursive=True)
        assert value["name"] == (f"customer {i}" if v < 3 else "anonymous")
        assert value["email"] == (None if v == 1 else f"c{i}@example.com")
        assert value["joined"] == expected["joined"].replace(tzinfo=None) or value[
            "joined"
        ].astimezone(datetime.timezone.utc) == expected["joined"]
        assert value["birthday"] == expected["birthday"]
        assert value["balance"] == expected["balance"]
        assert value["tier"] == expected["tier"]
        assert value["address"] == expected["address"]
        assert value["tags"] == expected["tags"]
        assert value["scores"] == expected["scores"]
    # reader: the latest (v3, no name): every record reads, name gone
    latest = batch_read(spark, kafka, registry, topic)
    assert "name" not in latest.schema["value"].dataType.fieldNames()
    assert latest.count() == len(records)
    assert latest.where("value.email IS NULL").count() == 20


def test_a_poison_record_fails_the_read_or_lands_in_the_error_column(
    spark: Any, kafka: EmbeddedKafka, registry: RegistryServer, new_topic: Any
) -> None:
    topic = new_topic()
    client = registry_client(registry)
    schema_id = client.register(f"{topic}-value", json.dumps(ADDRESS), "AVRO")
    good = confluent_avro(schema_id, ADDRESS, {"city": "Oslo", "zip": 150})
    kafka.produce(
        topic,
        [
            (0, None, good, None, None),
            (0, None, b"not framed at all", None, None),
            (0, None, good[:6], None, None),  # cut short
            (0, b"gone", None, None, None),  # a tombstone is no error
        ],
    )
    with pytest.raises(Exception, match=r"at offset 1 does not decode") as failed:
        batch_read(spark, kafka, registry, topic).collect()
    assert "mode=PERMISSIVE" in str(failed.value)
    rows = batch_read(spark, kafka, registry, topic, mode="PERMISSIVE").orderBy("offset").collect()
    assert [r.value and r.value.city for r in rows] == ["Oslo", None, None, None]
    assert rows[0].valueError is None and rows[3].valueError is None
    assert "framing" in rows[1].valueError and rows[1].valueRaw == b"not framed at all"
    assert rows[2].valueSchemaId == schema_id and rows[2].valueRaw == good[:6]
    assert rows[2].valueError is not None
