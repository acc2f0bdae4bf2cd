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

from unaligned.registry.connection.client import RegistryClient
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


def batch_read(
    spark: Any, kafka: EmbeddedKafka, registry: RegistryServer, topic: str, **options: str
) -> Any:
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
V2 = {
    **V1,
    "fields": [*V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}
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
            (
                i % 2,
                str(i).encode(),
                confluent_avro(ids[v - 1], (V1, V2, V3)[v - 1], customer(i, v)),
                None,
                None,
            )
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
        assert (
            value["joined"] == expected["joined"].replace(tzinfo=None)
            or value["joined"].astimezone(datetime.timezone.utc) == expected["joined"]
        )
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
    # reader: schema id of v1 (no email): v3 records get name's default
    first = batch_read(spark, kafka, registry, topic, valueSchemaId=str(ids[0]))
    assert first.schema["value"].dataType.fieldNames() == [f["name"] for f in V1["fields"]]
    assert first.where("value.name = 'anonymous'").count() == 20


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


def _run_to_end(writer: Any, checkpoint: Any, timeout_s: float = 240) -> None:
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(timeout_s), "query did not finish in time"
    assert query.exception() is None, query.exception()


def test_poison_records_go_to_a_dead_letter_topic_and_json_schema_round_trips(
    spark: Any, kafka: EmbeddedKafka, registry: RegistryServer, new_topic: Any, tmp_path: Any
) -> None:
    """Avro in, PERMISSIVE: good records out as JSON Schema, poison ones (their bytes
    unchanged) to a dead-letter topic, in the same transactions; the JSON reads back."""
    from pyspark.sql import functions as F

    source, out, dlq = new_topic(partitions=2), new_topic(), new_topic()
    client = registry_client(registry)
    schema_id = client.register(f"{source}-value", json.dumps(ADDRESS), "AVRO")
    poison = b"\0\0\0\0\0garbage"  # framed, but schema id 0 is not registered
    records = [
        (i % 2, None, confluent_avro(schema_id, ADDRESS, {"city": f"c{i}", "zip": i}), None, None)
        for i in range(40)
    ]
    records[7] = (1, None, poison, None, None)
    kafka.produce(source, records)
    stream = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "avro-confluent")
        .option("mode", "PERMISSIVE")
        .options(**registry.options())
        .load()
    )
    good = F.col("valueError").isNull()
    rows = stream.select(
        F.when(good, F.lit(out)).otherwise(F.lit(dlq)).alias("topic"),
        F.when(good, F.struct("value.city", "value.zip", "offset")).alias("value"),
        F.col("valueRaw"),
    )
    _run_to_end(
        rows.writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("valueFormat", "json-schema-confluent")
        .options(**registry.options()),
        tmp_path / "checkpoint",
    )
    assert [r.value for r in kafka.consume_all(dlq)] == [poison]
    back = (
        spark.read.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", out)
        .option("valueFormat", "json-schema-confluent")
        .options(**registry.options())
        .load()
    )
    got = sorted((r.value.city, r.value.zip) for r in back.collect())
    assert got == sorted((f"c{i}", i) for i in range(40) if i != 7)
    assert back.schema["value"].dataType.fieldNames() == ["city", "zip", "offset"]


def test_protobuf_values_and_avro_keys_round_trip_through_the_sink(
    spark: Any, kafka: EmbeddedKafka, registry: RegistryServer, new_topic: Any, tmp_path: Any
) -> None:
    from pyspark.sql import functions as F

    source, out = new_topic(), new_topic(partitions=2)
    kafka.produce(source, [(0, f"k{i}".encode(), f"v{i}".encode(), None, None) for i in range(30)])
    stream = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = stream.select(
        F.struct(F.col("key").cast("string").alias("name")).alias("key"),
        F.struct(
            F.col("value").cast("string").alias("text"),
            F.col("offset"),
            F.col("timestamp").alias("at"),
            F.array(F.lit("a"), F.col("value").cast("string")).alias("tags"),
            F.create_map(F.lit("n"), F.col("offset").cast("int")).alias("counts"),
            F.struct(F.lit(1.5).alias("x")).alias("inner"),
        ).alias("value"),
    )
    _run_to_end(
        rows.writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", out)
        .option("valueFormat", "protobuf-confluent")
        .option("valueRecordName", "shop.Note")
        .option("keyFormat", "avro-confluent")
        .option("keySubjectNameStrategy", "record")
        .option("keyRecordName", "shop.NoteKey")
        .options(**registry.options()),
        tmp_path / "checkpoint",
    )
    # the planner and the tasks derived the same schemas: one version each
    assert registry_client(registry).versions("shop.NoteKey") == [1]
    assert registry_client(registry).versions(f"{out}-value") == [1]
    back = (
        spark.read.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", out)
        .option("valueFormat", "protobuf-confluent")
        .option("keyFormat", "avro-confluent")
        .option("keySubject", "shop.NoteKey")
        .options(**registry.options())
        .load()
        .collect()
    )
    assert sorted((r.key.name, r.value.text, r.value.offset) for r in back) == sorted(
        (f"k{i}", f"v{i}", i) for i in range(30)
    )
    one = next(r for r in back if r.value.offset == 3)
    assert one.value.tags == ["a", "v3"] and one.value.counts == {"n": 3}
    assert one.value.inner.x == 1.5 and one.value.at is not None
    assert one.valueSchemaId is not None and one.keySchemaId is not None


def test_wrong_credentials_are_refused_without_showing_them(registry: RegistryServer) -> None:
    from unaligned.errors import SchemaRegistryError

    options = {
        "valueformat": "avro-confluent",
        "schema.registry.url": registry.tls_url,
        "schema.registry.ssl.ca.location": str(registry.ca_file),
        "schema.registry.basic.auth.user.info": "registry-user:not-the-password-42",
    }
    formats = parse_formats(options, sink=False)
    assert formats is not None
    with pytest.raises(SchemaRegistryError, match="HTTP 401") as refused:
        RegistryClient(formats.registry).subject_version("anything-value", None)
    assert "not-the-password-42" not in str(refused.value)
    assert "registry-user:" not in str(refused.value)


def test_without_auto_registration_an_unregistered_schema_is_refused(
    registry: RegistryServer,
) -> None:
    import pyarrow as pa

    from unaligned.errors import RecordFormatError
    from unaligned.registry.record_encoding import writer_schema

    options = {k.lower(): v for k, v in registry.options().items()}
    formats = parse_formats(
        {"valueformat": "avro-confluent", "autoregisterschemas": "false", **options}, sink=True
    )
    assert formats is not None and formats.value is not None
    with pytest.raises(RecordFormatError, match="not registered under subject 'nowhere-value'"):
        writer_schema(formats, formats.value, "nowhere", pa.struct([("a", pa.int64())]))


def test_records_of_known_ids_decode_while_the_registry_is_down(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Any
) -> None:
    """The reader and its subject's other versions travel with the query: the registry going
    down mid-run stops nothing that reads records written with them."""
    from harness import wait_for_query

    topic = new_topic()
    with RegistryServer(tmp_path / "registry") as own:
        client = registry_client(own)
        subject = f"{topic}-value"
        ids = [client.register(subject, json.dumps(s), "AVRO") for s in (V1, V2)]

        def produce(first: int) -> None:
            kafka.produce(
                topic,
                [
                    (
                        0,
                        None,
                        confluent_avro(ids[i % 2], (V1, V2)[i % 2], customer(i, i % 2 + 1)),
                        None,
                        None,
                    )
                    for i in range(first, first + 10)
                ],
            )

        produce(0)
        stream = (
            spark.readStream.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("valueFormat", "avro-confluent")
            .option("valueSchemaVersion", "1")
            .options(**own.options())
            .load()
        )
        query = (
            stream.select("value.id", "valueSchemaId")
            .writeStream.format("memory")
            .queryName("registry_down")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            seen = lambda: spark.sql("SELECT count(*) FROM registry_down").first()[0]  # noqa: E731
            wait_for_query(query, lambda: seen() == 10, "the first 10 records", 120)
            own.stop()
            produce(10)
            wait_for_query(query, lambda: seen() == 20, "10 more records, registry down", 120)
        finally:
            query.stop()
    rows = spark.sql("SELECT id, valueSchemaId FROM registry_down").collect()
    assert sorted(r.id for r in rows) == list(range(20))
    assert {r.valueSchemaId for r in rows} == set(ids)
