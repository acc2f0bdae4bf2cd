"""Schema Registry data as Confluent's own Python client writes and reads it (``confluent-kafka``
2.16: ``AvroSerializer``, ``JSONSerializer``, ``ProtobufSerializer`` and their deserializers),
against the test kit's registry (Apicurio, through :mod:`confluent_front`, which corrects its
``format=serialized`` answers). Each test goes both ways in one run: Confluent's records read by
our source with every field compared, then written by our sink (the same query) and read back
by Confluent's deserializer, compared with what Confluent wrote."""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import (
    JSONDeserializer,
    JSONSerializer,
)
from confluent_kafka.schema_registry.protobuf import (
    ProtobufDeserializer,
    ProtobufSerializer,
)
from confluent_kafka.serialization import MessageField, SerializationContext

from confluent_front import ConfluentFront
from test_registry_formats import ADDRESS, V1, V2, _run_to_end, customer
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


# --- Protobuf ---------------------------------------------------------------------------------

COMMON = """syntax = "proto3";
package shop.common;
message Money { string currency = 1; int64 units = 2; int32 nanos = 3; }
"""
ORDERS = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "shop/common.proto";
message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  message Line { string sku = 1; int32 qty = 2; repeated string notes = 3; }
  string id = 1;
  Status status = 2;
  google.protobuf.Timestamp at = 3;
  repeated Line lines = 4;
  map<string, int64> attrs = 5;
  oneof payment { shop.common.Money card = 6; string voucher = 7; }
  optional string comment = 8;
  google.protobuf.StringValue channel = 9;
  bytes blob = 10;
  double ratio = 11;
  EMAIL
}
message Refund { string order_id = 1; shop.common.Money amount = 2; uint64 big = 3; }
"""


def proto_classes(tmp: Path, version: int) -> dict[str, Any]:
    """Message classes of ``shop/orders.proto`` (``version`` 2 adds ``email``), compiled by
    ``protoc`` as a user's build would (``grpcio-tools``), each version in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    root = tmp / f"v{version}"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "common.proto").write_text(COMMON)
    email = "string email = 12;" if version == 2 else ""
    (root / "shop" / "orders.proto").write_text(ORDERS.replace("EMAIL", email))
    out = root / "set.pb"
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{include}"]
        + ["--include_imports", f"--descriptor_set_out={out}", "shop/orders.proto"],
        check=True,
        cwd=root,
    )
    pool = descriptor_pool.DescriptorPool()
    for proto in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
        for name in ("Order", "Refund")
    }


def order(classes: dict[str, Any], i: int, version: int) -> Any:
    at = datetime.datetime(2024, 3, 1, tzinfo=datetime.timezone.utc)
    message = classes["Order"](
        id=f"o{i}",
        status=i % 3,
        lines=[{"sku": f"s{j}", "qty": j, "notes": ["n"] * j} for j in range(i % 3)],
        attrs={f"a{j}": j * 1000 for j in range(i % 2 + 1)},
        blob=bytes([i, 255, 0]),
        ratio=i / 4,
    )
    message.at.FromDatetime(at + datetime.timedelta(seconds=i, microseconds=i))
    if i % 2:
        message.card.currency, message.card.units, message.card.nanos = "EUR", i, 5
    else:
        message.voucher = f"v{i}"
    if i % 3 == 0:
        message.comment = f"comment {i}"
    if i % 4 == 0:
        message.channel.value = "web"
    if version == 2:
        message.email = f"o{i}@example.com"
    return message


def expected_order(i: int, version: int) -> dict[str, Any]:
    at = datetime.datetime(2024, 3, 1, tzinfo=datetime.timezone.utc)
    return {
        "id": f"o{i}",
        "status": ("NEW", "PAID", "SHIPPED")[i % 3],
        "at": at + datetime.timedelta(seconds=i, microseconds=i),
        "lines": [{"sku": f"s{j}", "qty": j, "notes": ["n"] * j} for j in range(i % 3)],
        "attrs": {f"a{j}": j * 1000 for j in range(i % 2 + 1)},
        "card": {"currency": "EUR", "units": i, "nanos": 5} if i % 2 else None,
        "voucher": None if i % 2 else f"v{i}",
        "comment": f"comment {i}" if i % 3 == 0 else None,
        "channel": {"value": "web"} if i % 4 == 0 else None,
        "blob": bytes([i, 255, 0]),
        "ratio": i / 4,
        "email": f"o{i}@example.com" if version == 2 else "",
    }


def test_protobuf_both_ways_with_references_and_evolution(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
    tmp_path: Path,
) -> None:
    """Confluent's serializer registers both files as serialized descriptors (the import as a
    reference); records of version 1 and 2 read with the latest; our sink writes Order with
    the registered schema and Confluent's deserializer reads back what was written."""
    source, out = new_topic(), new_topic()
    v1, v2 = proto_classes(tmp_path, 1), proto_classes(tmp_path, 2)
    writers = {
        1: ProtobufSerializer(v1["Order"], confluent),
        2: ProtobufSerializer(v2["Order"], confluent),
    }
    versions = {i: 1 if i < 6 else 2 for i in range(12)}
    produce(
        kafka,
        source,
        [
            writers[v](order(v1 if v == 1 else v2, i, v), value_context(source))
            for i, v in versions.items()
        ],
    )
    registered = confluent.get_latest_version(f"{source}-value").schema
    assert ";" not in registered.schema_str  # kept as Confluent's client sent it: base64
    frame = read(spark, kafka, front, source, valueFormat="protobuf-confluent")
    rows = frame.collect()
    assert len(rows) == 12
    for row in rows:
        i = int(row.key)
        got = row.value.asDict(recursive=True)
        got["at"] = utc(got["at"])
        assert got == expected_order(i, versions[i])
    copy(
        spark,
        kafka,
        front,
        source,
        out,
        tmp_path / "c",
        {"valueFormat": "protobuf-confluent"},
        {
            "valueFormat": "protobuf-confluent",
            "valueSubject": f"{source}-value",
            "valueSchemaVersion": "latest",
            "valueMessageName": "shop.Order",
        },
    )
    deserializer = ProtobufDeserializer(v2["Order"], schema_registry_client=confluent)
    back = {int(r.key): deserializer(r.value, value_context(out)) for r in kafka.consume_all(out)}
    assert back == {i: order(v2, i, 2 if v == 2 else 1) for i, v in versions.items()}
    assert front.serialized_answers > 0


def test_protobuf_derived_schema_read_by_confluent(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
    tmp_path: Path,
) -> None:
    """The sink's own schema (.proto text derived from the column) fetched by Confluent's
    deserializer with format=serialized: the answer the registry gets wrong, which the front
    corrects."""
    from unaligned.registry.client import RegisteredSchema
    from unaligned.registry.protobuf_schema import compiled
    from unaligned.registry.schemas import ResolvedSchema

    source, out = new_topic(), new_topic()
    produce(kafka, source, [f"v{i}".encode() for i in range(10)])
    stream = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(
            "key",
            "named_struct('text', cast(value as string), 'n', offset, 'at', timestamp, "
            "'tags', array('a', cast(value as string)), 'm', map('k', cast(offset as int)), "
            "'inner', named_struct('x', 1.5D)) AS value",
        )
    )
    _run_to_end(
        stream.writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", out)
        .option("valueFormat", "protobuf-confluent")
        .option("valueRecordName", "shop.Note")
        .options(**front.options()),
        tmp_path / "c",
    )
    text = confluent.get_latest_version(f"{out}-value").schema.schema_str
    assert text.startswith('syntax = "proto3";')  # the sink registers .proto text
    loaded = compiled(ResolvedSchema(RegisteredSchema(0, "PROTOBUF", text)))
    note = loaded.message_class(loaded.message_named("shop.Note"))
    deserializer = ProtobufDeserializer(note, schema_registry_client=confluent)
    for record in kafka.consume_all(out):
        message = deserializer(record.value, value_context(out))
        offset = message.n
        assert message.text == f"v{offset}" and list(message.tags) == ["a", f"v{offset}"]
        assert dict(message.m) == {"k": offset} and message.inner.x == 1.5
        assert message.at.seconds > 0


def test_protobuf_second_message_two_types_and_uint64_max(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
    tmp_path: Path,
) -> None:
    """Records of the file's second message (message indexes [1]) read with valueMessageName;
    the same file under RecordNameStrategy (one id under both subjects) read as two types;
    uint64 max read as Spark's from_protobuf does, in both modes and with the upcast."""
    classes = proto_classes(tmp_path, 1)
    both, per_record = new_topic(), new_topic()
    values: list[bytes] = []
    record_values: list[bytes] = []
    conf = {"subject.name.strategy": record_subject_name_strategy}
    by_topic = {name: ProtobufSerializer(classes[name], confluent) for name in ("Order", "Refund")}
    by_record = {
        name: ProtobufSerializer(classes[name], confluent, conf) for name in ("Order", "Refund")
    }
    for i in range(20):
        name = "Refund" if i % 2 else "Order"
        message = (
            classes["Refund"](order_id=f"o{i}", amount={"units": i}, big=2**64 - 1 - i)
            if i % 2
            else order(classes, i, 1)
        )
        values.append(by_topic[name](message, value_context(both)))
        record_values.append(by_record[name](message, value_context(per_record)))
    produce(kafka, both, values)
    produce(kafka, per_record, record_values)
    # the second message: Refunds decode, the Orders are not Refunds (error rows in
    # PERMISSIVE, the read stopped in FAILFAST, both naming the option)
    rows = read(
        spark,
        kafka,
        front,
        both,
        valueFormat="protobuf-confluent",
        valueMessageName="Refund",
        mode="PERMISSIVE",
    ).collect()
    assert len(rows) == 20
    for row in rows:
        i = int(row.key)
        if i % 2 == 0:
            assert row.value is None and "valueMessageName" in row.valueError
            continue
        assert row.valueError is None
        assert row.value.asDict(recursive=True) == {
            "order_id": f"o{i}",
            "amount": {"currency": "", "units": i, "nanos": 0},
            "big": -1 - i,  # Java's long, as Spark's from_protobuf reads uint64
        }
    with pytest.raises(Exception, match="valueMessageName"):
        read(
            spark, kafka, front, both, valueFormat="protobuf-confluent", valueMessageName="Refund"
        ).collect()
    upcast = read(
        spark,
        kafka,
        front,
        per_record,
        valueFormat="protobuf-confluent",
        valueSubjectNameStrategy="record",
        valueRecordName="shop.Order,shop.Refund",
        upcastUnsignedInts="true",
        mode="PERMISSIVE",
    )
    assert upcast.schema["value"].dataType.fieldNames() == ["Order", "Refund"]
    assert upcast.schema["value"].dataType["Refund"].dataType["big"].dataType.simpleString() == (
        "decimal(20,0)"
    )
    rows = upcast.collect()
    assert len(rows) == 20 and all(r.valueError is None for r in rows)
    for row in rows:
        i = int(row.key)
        if i % 2:
            assert row.value.Order is None
            assert row.value.Refund.big == decimal.Decimal(2**64 - 1 - i)
        else:
            assert row.value.Refund is None and row.value.Order.id == f"o{i}"
    failfast = read(
        spark,
        kafka,
        front,
        per_record,
        valueFormat="protobuf-confluent",
        valueSubjectNameStrategy="record",
        valueRecordName="shop.Order,shop.Refund",
    )
    bigs = sorted(r.value.Refund.big for r in failfast.collect() if r.value.Refund is not None)
    assert bigs == sorted(-1 - i for i in range(1, 20, 2))


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
