"""Protobuf as Confluent's own Python client writes and reads it (``ProtobufSerializer`` /
``ProtobufDeserializer``): serialized descriptors with references, evolution, a file's second
message, two message types under RecordNameStrategy, uint64 as Spark reads it; and the sink's
own ``.proto`` text read by Confluent's deserializer through the registry front."""

# ruff: noqa: F811  (the fixtures front and confluent come from confluent_clients)
from __future__ import annotations

import datetime
import decimal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

from confluent_clients import (  # noqa: F401
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
from test_registry_formats import _run_to_end
from unaligned.testing import EmbeddedKafka

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
    from unaligned.registry.connection.client import RegisteredSchema
    from unaligned.registry.connection.schemas import ResolvedSchema
    from unaligned.registry.protobuf.protobuf_schema import compiled

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


def test_protobuf_schema_ids_in_headers_with_message_indexes(
    spark: Any,
    kafka: EmbeddedKafka,
    front: ConfluentFront,
    confluent: SchemaRegistryClient,
    new_topic: Any,
    tmp_path: Path,
) -> None:
    """Confluent's header form for Protobuf: the message indexes travel in the header after the
    id, the payload is the bare message. Orders and Refunds (the file's second message) under
    RecordNameStrategy, header and prefix records mixed, read as two record types."""
    classes = proto_classes(tmp_path, 1)
    topic = new_topic()
    conf = {"subject.name.strategy": record_subject_name_strategy}
    with_header = {**conf, "schema.id.serializer": id_header_serializer}
    writers = {
        (name, header): ProtobufSerializer(
            classes[name], confluent, with_header if header else conf
        )
        for name in ("Order", "Refund")
        for header in (True, False)
    }
    readers = {
        name: ProtobufDeserializer(classes[name], schema_registry_client=confluent)
        for name in ("Order", "Refund")
    }
    records = []
    for i in range(12):
        name = "Refund" if i % 2 else "Order"
        message = (
            classes["Refund"](order_id=f"o{i}", amount={"units": i}, big=i)
            if i % 2
            else order(classes, i, 1)
        )
        ctx = header_context(topic)
        value = writers[(name, i % 4 < 2)](message, ctx)
        assert readers[name](value, ctx) == message  # Confluent's default deserializer reads it
        records.append((0, str(i).encode(), value, ctx.headers, None))
    assert sum(bool(headers) for _, _, _, headers, _ in records) == 6
    kafka.produce(topic, records)
    rows = read(
        spark,
        kafka,
        front,
        topic,
        valueFormat="protobuf-confluent",
        valueSubjectNameStrategy="record",
        valueRecordName="shop.Order,shop.Refund",
    ).collect()
    assert len(rows) == 12
    for row in rows:
        i = int(row.key)
        if i % 2:
            assert row.value.Order is None
            assert row.value.Refund.asDict(recursive=True) == {
                "order_id": f"o{i}",
                "amount": {"currency": "", "units": i, "nanos": 0},
                "big": i,
            }
        else:
            got = row.value.Order.asDict(recursive=True)
            got["at"] = utc(got["at"])
            want = {k: v for k, v in expected_order(i, 1).items() if k != "email"}
            assert row.value.Refund is None and got == want
