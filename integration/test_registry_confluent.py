"""Schema Registry data as Confluent's own Python client writes and reads it (``confluent-kafka``
2.16: ``AvroSerializer``, ``JSONSerializer``, ``ProtobufSerializer`` and their deserializers),
against the test kit's registry (Apicurio, through :mod:`confluent_front`, which corrects its
``format=serialized`` answers). Each test goes both ways in one run: Confluent's records read by
our source with every field compared, then written by our sink (the same query) and read back
by Confluent's deserializer, compared with what Confluent wrote."""

# ruff: noqa: F811  (the fixtures front and confluent come from confluent_clients)
from __future__ import annotations

import datetime
import decimal
import functools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    header_schema_id_serializer,
    topic_record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import SerializationError

from confluent_clients import (  # noqa: F401
    VALUE_SCHEMA_ID_HEADER,
    ConfluentFront,
    confluent,
    copy,
    front,
    header_context,
    id_header_serializer,
    produce,
    read,
    utc,
    value_context,
)
from test_registry_formats import ADDRESS, V1, V2, _run_to_end, customer
from unaligned.testing import EmbeddedKafka

# --- Avro -------------------------------------------------------------------------------------


def test_avro_both_ways_across_versions(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
    tmp_path: Path,
) -> None:
    source, out = new_topic(), new_topic()
    writers = {v: AvroSerializer(confluent, json.dumps(s)) for v, s in ((1, V1), (2, V2))}
    records = [(i, 1 if i < 10 else 2) for i in range(20)]
    produce(kafka, source, [writers[v](customer(i, v), value_context(source)) for i, v in records])
    rows = read(spark, kafka, front, source, valueFormat="avro-confluent").collect()
    assert len(rows) == 20
    ids = {confluent.get_latest_version(f"{source}-value").schema_id}
    for row in rows:
        i = int(row.key)
        expected = {**customer(i, 2), "email": None if i < 10 else f"c{i}@example.com"}
        got = row.value.asDict(recursive=True)
        got["joined"] = utc(got["joined"])
        assert got == expected
        ids.add(row.valueSchemaId)
    assert len(ids) == 2  # two writer ids, the reader the latest
    copy(
        spark,
        kafka,
        front,
        source,
        out,
        tmp_path / "c",
        {"valueFormat": "avro-confluent"},
        {"valueFormat": "avro-confluent", "valueSubject": f"{source}-value"}
        | {"valueSchemaVersion": "latest"},
    )
    deserializer = AvroDeserializer(confluent)
    back = {int(r.key): deserializer(r.value, value_context(out)) for r in kafka.consume_all(out)}
    assert back == {
        i: {**customer(i, 2), "email": None if i < 10 else f"c{i}@example.com"} for i, _ in records
    }


def test_two_avro_record_types_in_one_topic(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
) -> None:
    """TopicRecordNameStrategy, as Confluent's serializer writes it: one struct field per
    record type, the other type's null; every record decodes."""
    topic = new_topic()
    conf = {"subject.name.strategy": topic_record_subject_name_strategy}
    customers = AvroSerializer(confluent, json.dumps(V1), conf=conf)
    addresses = AvroSerializer(confluent, json.dumps(ADDRESS), conf=conf)
    values = []
    for i in range(40):
        if i % 2:
            values.append(addresses({"city": f"c{i}", "zip": i}, value_context(topic)))
        else:
            values.append(customers(customer(i, 1), value_context(topic)))
    produce(kafka, topic, values)
    frame = read(
        spark,
        kafka,
        front,
        topic,
        valueFormat="avro-confluent",
        valueSubjectNameStrategy="topic-record",
        valueRecordName="shop.Customer,address=Address",
        mode="PERMISSIVE",
    )
    assert frame.schema["value"].dataType.fieldNames() == ["Customer", "address"]
    rows = frame.collect()
    assert len(rows) == 40 and all(r.valueError is None for r in rows)
    for row in rows:
        i = int(row.key)
        if i % 2:
            assert row.value.Customer is None
            assert row.value.address.asDict() == {"city": f"c{i}", "zip": i}
        else:
            assert row.value.address is None and row.value.Customer.id == i


# --- JSON Schema ------------------------------------------------------------------------------

JSON_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Shipment",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "weight": {"type": "number"},
        "sent": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "to": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": ["null", "integer"]}},
        },
        "items": {"type": "array", "items": {"type": "string"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "state": {"enum": ["NEW", "SENT"]},
        "fragile": {"type": "boolean"},
    },
    "required": ["id"],
}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "note": {"type": "string"}}}


def shipment(i: int, version: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": i,
        "weight": i + 0.25,
        "sent": f"2024-05-0{1 + i % 9}T10:00:0{i % 10}Z",
        "day": f"2024-05-{10 + i % 20}",
        "to": {"city": f"city {i}", "zip": None if i % 3 == 0 else 1000 + i},
        "items": [f"item{j}" for j in range(i % 3)],
        "counts": {f"k{j}": j for j in range(i % 2 + 1)},
        "state": "SENT" if i % 2 else "NEW",
        "fragile": i % 4 == 0,
    }
    if version == 2:
        doc["note"] = f"note {i}"
    return doc


def test_json_schema_both_ways_across_versions_with_exact_decimals(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
    tmp_path: Path,
) -> None:
    from pyspark.sql import functions as F

    source, out = new_topic(), new_topic()
    writers = {v: JSONSerializer(json.dumps(s), confluent) for v, s in ((1, JSON_V1), (2, JSON_V2))}
    records = [(i, 1 if i < 8 else 2) for i in range(16)]
    produce(kafka, source, [writers[v](shipment(i, v), value_context(source)) for i, v in records])
    frame = read(spark, kafka, front, source, valueFormat="json-schema-confluent")
    for row in frame.collect():
        i, v = int(row.key), 1 if int(row.key) < 8 else 2
        want = shipment(i, v)
        got = row.value.asDict(recursive=True)
        assert got["sent"].astimezone(datetime.timezone.utc) == datetime.datetime.fromisoformat(
            want["sent"].replace("Z", "+00:00")
        )
        assert got["day"] == datetime.date.fromisoformat(want["day"])
        assert got["note"] == want.get("note")
        for name in ("id", "weight", "to", "items", "counts", "state", "fragile"):
            assert got[name] == want[name], name
    # the sink: the same records and a 38-digit decimal, read by Confluent's deserializer
    exact = "1234567890123456789.0123456789"
    stream = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "json-schema-confluent")
        .options(**front.options())
        .load()
        .select(
            "key",
            F.struct(
                "value.id",
                "value.to",
                "value.items",
                "value.counts",
                "value.note",
                F.lit(exact).cast("decimal(38,10)").alias("amount"),
            ).alias("value"),
        )
    )
    _run_to_end(
        stream.writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", out)
        .option("valueFormat", "json-schema-confluent")
        .options(**front.options()),
        tmp_path / "c",
    )
    exact_json = functools.partial(json.loads, parse_float=decimal.Decimal)
    deserializer = JSONDeserializer(None, schema_registry_client=confluent, json_decode=exact_json)
    for record in kafka.consume_all(out):
        assert exact.encode() in record.value  # every digit on the wire
        got = deserializer(record.value, value_context(out))
        i = int(record.key)
        want = shipment(i, 1 if i < 8 else 2)
        assert got["amount"] == decimal.Decimal(exact)
        assert {k: got[k] for k in ("id", "to", "items", "counts")} == {
            k: want[k] for k in ("id", "to", "items", "counts")
        }
        assert got["note"] == want.get("note")


def test_an_inline_reader_schema_reads_without_a_subject(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
) -> None:
    """Spark's ``from_avro(jsonFormatSchema)``: the reader schema given inline (a projection of
    the writer's), the writers' schemas from the registry by id."""
    topic = new_topic()
    serializer = AvroSerializer(confluent, json.dumps(V2))
    produce(kafka, topic, [serializer(customer(i, 2), value_context(topic)) for i in range(5)])
    reader = {
        "type": "record",
        "name": "Customer",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "email", "type": ["null", "string"], "default": None},
            {"name": "vip", "type": "boolean", "default": False},
        ],
    }
    frame = read(
        spark, kafka, front, topic, valueFormat="avro-confluent", valueSchema=json.dumps(reader)
    )
    rows = sorted((r.value.id, r.value.email, r.value.vip) for r in frame.collect())
    assert rows == [(i, f"c{i}@example.com", False) for i in range(5)]


# --- schema ids in record headers -------------------------------------------------------------


def test_schema_ids_in_headers_read_header_first_then_the_prefix(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
) -> None:
    """Confluent's header form beside the payload prefix in one topic, Avro and JSON Schema:
    every record reads as Confluent's dual deserializer reads it, the headers column stays out
    unless asked for. A schema GUID header against a registry that serves no GUIDs fails the
    read naming that; Confluent's own GUID serializer cannot write against it either."""
    avro_topic, json_topic, guid_topic = new_topic(), new_topic(), new_topic()
    guid_writer = AvroSerializer(
        confluent, json.dumps(V1), conf={"schema.id.serializer": header_schema_id_serializer}
    )
    with pytest.raises(SerializationError, match="GUID is not set"):
        guid_writer(customer(0, 1), header_context(guid_topic))
    for topic, fmt, writers, make in (
        (
            avro_topic,
            "avro-confluent",
            {
                header: AvroSerializer(confluent, json.dumps(V2), conf=conf)
                for header, conf in (
                    (True, {"schema.id.serializer": id_header_serializer}),
                    (False, {}),
                )
            },  # fmt: skip
            lambda i: customer(i, 2),
        ),
        (
            json_topic,
            "json-schema-confluent",
            {
                header: JSONSerializer(json.dumps(JSON_V1), confluent, conf=conf)
                for header, conf in (
                    (True, {"schema.id.serializer": id_header_serializer}),
                    (False, {}),
                )
            },  # fmt: skip
            lambda i: shipment(i, 1),
        ),
    ):
        records = []
        for i in range(10):
            ctx = header_context(topic)
            value = writers[i % 2 == 0](make(i), ctx)
            assert bool(ctx.headers) is (i % 2 == 0)  # the header form: no prefix, a header
            records.append((0, str(i).encode(), value, ctx.headers, None))
            dual = (AvroDeserializer(confluent) if fmt == "avro-confluent"
                    else JSONDeserializer(None, schema_registry_client=confluent))  # fmt: skip
            assert dual(value, ctx) == make(i)  # Confluent's default deserializer reads it
        kafka.produce(topic, records)
        frame = read(spark, kafka, front, topic, valueFormat=fmt)
        assert "headers" not in frame.columns
        rows = frame.collect()
        assert len(rows) == 10
        assert len({r.valueSchemaId for r in rows}) == 1 and rows[0].valueSchemaId is not None
        for row in rows:
            got, want = row.value.asDict(recursive=True), make(int(row.key))
            if fmt == "avro-confluent":
                assert got["id"] == want["id"] and got["email"] == want["email"]
            else:
                assert {k: got[k] for k in ("id", "to", "items")} == {
                    k: want[k] for k in ("id", "to", "items")
                }
        if topic == avro_topic:
            kept = read(spark, kafka, front, topic, valueFormat=fmt, includeHeaders="true")
            assert sum(bool(r.headers) for r in kept.collect()) == 5
    guid = SchemaId("AVRO", guid=str(uuid.uuid4())).guid_to_bytes()
    kafka.produce(guid_topic, [(0, b"0", b"\x02", [(VALUE_SCHEMA_ID_HEADER, guid)], None)])
    with pytest.raises(Exception, match="does not serve schema GUIDs"):
        inline = {"valueFormat": "avro-confluent", "valueSchema": json.dumps(V1)}
        read(spark, kafka, front, guid_topic, **inline).collect()
