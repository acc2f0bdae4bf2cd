"""Decoding Confluent-framed Avro of 20 fields: ours (``valueFormat=avro-confluent``, column-wise
numpy in the read task) against Spark's ``from_avro`` (the ``spark-avro`` jar, the 5-byte header
stripped with ``substring(value, 6)``), on the same records in the same run.

Run: ``python -m benchmarks registry_avro``. Prints the figures and writes
``integration/benchmarks/results/registry_avro.json``. Needs Maven (it fetches
``org.apache.spark:spark-avro_2.13`` of pyspark's version, else the newest 4.x on Maven Central)
and Java 21+ for the test registry (Apicurio, :mod:`unaligned.testing.registry_server`).

Data: :data:`RECORDS` records of :data:`SCHEMA` (6 longs, 4 ints, 4 strings of 5-20 chars, 2
doubles, a boolean, a nullable string, a timestamp-millis and an enum; about 130 bytes each),
written by fastavro behind the header of the schema's registered id. Measured, the median of
:data:`ROUNDS` rounds, variants alternating within each round:

1. decoding alone, one core each: ours over the read task's Arrow batches (65,536 rows) in this
   Python process, against ``from_avro`` over the same bytes cached in Spark in one partition
   (one task) into the ``noop`` sink (the time of the same query without ``from_avro``
   subtracted, and not);
2. end to end on ``local[2]`` from the embedded broker (8 partitions): ``spark.read`` of our
   source decoding the value, against our source's binary value decoded by ``from_avro``: the
   same Kafka reads, so the difference is the decoding.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import local_spark, write_results

RECORDS = 1_000_000
PARTITIONS = 8
ROUNDS = 3
BATCH_ROWS = 65_536
SPARK_AVRO_VERSIONS = ("4.3.0", "4.2.0")

FIELDS: list[dict[str, Any]] = [
    *({"name": f"l{i}", "type": "long"} for i in range(6)),
    *({"name": f"i{i}", "type": "int"} for i in range(4)),
    *({"name": f"s{i}", "type": "string"} for i in range(4)),
    {"name": "d0", "type": "double"},
    {"name": "d1", "type": "double"},
    {"name": "flag", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C", "D"]}},
]
SCHEMA = {"type": "record", "name": "Event", "namespace": "bench", "fields": FIELDS}


def spark_avro_jar() -> Path:
    """The spark-avro jar from the local Maven repository (fetched by Maven once)."""
    repo = Path.home() / ".m2" / "repository" / "org" / "apache" / "spark" / "spark-avro_2.13"
    for version in SPARK_AVRO_VERSIONS:
        jar = repo / version / f"spark-avro_2.13-{version}.jar"
        if not jar.exists():
            subprocess.run(
                ["mvn", "-q", "-B", "dependency:get", "-Dtransitive=false",
                 f"-Dartifact=org.apache.spark:spark-avro_2.13:{version}"],
                capture_output=True, check=False, timeout=600,
            )  # fmt: skip
        if jar.exists():
            return jar
    raise RuntimeError(f"Maven found no spark-avro_2.13 of {SPARK_AVRO_VERSIONS}")


def make_payloads(count: int) -> list[bytes]:
    """``count`` Avro payloads (no header), deterministic; a few thousand distinct ones."""
    import fastavro
    import numpy as np

    parsed = fastavro.parse_schema(SCHEMA)
    rng = np.random.default_rng(7)
    distinct = []
    for k in range(4096):
        record: dict[str, Any] = {f"l{i}": int(rng.integers(0, 10**12)) for i in range(6)}
        record |= {f"i{i}": int(rng.integers(-(10**6), 10**6)) for i in range(4)}
        record |= {f"s{i}": "v" * int(rng.integers(5, 21)) for i in range(4)}
        record |= {
            "d0": float(rng.random()),
            "d1": k / 3,
            "flag": bool(k % 2),
            "note": None if k % 4 == 0 else f"note {k}",
            "at": 1_700_000_000_000 + k,
            "kind": "ABCD"[k % 4],
        }
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        distinct.append(out.getvalue())
    return [distinct[i % len(distinct)] for i in range(count)]


def framed(schema_id: int, payloads: list[bytes]) -> list[bytes]:
    header = b"\0" + struct.pack(">I", schema_id)
    return [header + p for p in payloads]


# --- 1. decoding alone ----------------------------------------------------------------------


def ours_decode_only(values: list[bytes], schema_id: int) -> float:
    """Seconds for our decoding of every value, batch by batch, in this process."""
    import pyarrow as pa

    from unaligned.kafka.records.record_columns import kafka_arrow_schema
    from unaligned.kafka.records.source_schema import kafka_source_schema
    from unaligned.registry.connection.client import RegisteredSchema
    from unaligned.registry.connection.schemas import ColumnReading, ResolvedSchema
    from unaligned.registry.options import (
        ColumnFormat,
        Format,
        RecordFormats,
        RegistryConfig,
        SchemaChoice,
    )
    from unaligned.registry.record_decoding import RecordDecoding

    column = ColumnFormat("value", Format.AVRO, SchemaChoice())
    formats = RecordFormats(RegistryConfig(urls=("http://127.0.0.1:1",)), column, None)
    reader = ResolvedSchema(RegisteredSchema(schema_id, "AVRO", json.dumps(SCHEMA)))
    decoding = RecordDecoding(formats, (ColumnReading(column, reader),))
    schema = kafka_arrow_schema(False)
    batches = []
    for lo in range(0, len(values), BATCH_ROWS):
        chunk = values[lo : lo + BATCH_ROWS]
        n = len(chunk)
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "key": [None] * n,
                    "value": chunk,
                    "topic": ["t"] * n,
                    "partition": [0] * n,
                    "offset": list(range(lo, lo + n)),
                    "timestamp": [0] * n,
                    "timestampType": [0] * n,
                },
                schema=schema,
            )
        )
    started = time.perf_counter()
    rows = sum(b.num_rows for b in decoding.decode_all(batches, kafka_source_schema(False)))
    elapsed = time.perf_counter() - started
    assert rows == len(values)
    return elapsed


def spark_decode_only(spark: Any, values: list[bytes]) -> tuple[float, float]:
    """(seconds of the noop query with from_avro, seconds of the same query without it)."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    table = pa.table({"value": pa.array(values, pa.binary())})
    df = spark.createDataFrame(table).repartition(1).cache()
    df.count()
    decoded = df.select(from_avro(F.expr("substring(value, 6)"), json.dumps(SCHEMA)).alias("v"))
    decoded = decoded.select("v.*")
    plain = df.select(F.expr("substring(value, 6)").alias("v"))

    def timed(frame: Any) -> float:
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    timed(decoded)  # warm-up (code generation, the jar's classes)
    with_avro, without = timed(decoded), timed(plain)
    df.unpersist()
    return with_avro, without


# --- 2. end to end ----------------------------------------------------------------------------


def end_to_end(spark: Any, bootstrap: str, topic: str, registry: Any, ours: bool) -> float:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    reader = (
        spark.read.format("unaligned")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("readTasks", "2")
    )
    if ours:
        frame = (
            reader.option("valueFormat", "avro-confluent")
            .options(**registry.options())
            .load()
            .select("value.*")
        )
    else:
        value = from_avro(F.expr("substring(value, 6)"), json.dumps(SCHEMA))
        frame = reader.load().select(value.alias("v")).select("v.*")
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main() -> None:
    # Spark's Python workers run PYSPARK_PYTHON (./dev sets it; a direct run may not)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from unaligned.registry.connection.client import RegistryClient
    from unaligned.registry.options import parse_formats
    from unaligned.testing import EmbeddedKafka
    from unaligned.testing.registry_server import RegistryServer

    jar = spark_avro_jar()
    payloads = make_payloads(RECORDS)
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as work:
        root = Path(work)
        with (
            RegistryServer(root / "registry") as registry,
            EmbeddedKafka(data_dir=root / "kafka") as kafka,
        ):
            options = {k.lower(): v for k, v in registry.options().items()}
            formats = parse_formats({"valueformat": "avro-confluent", **options}, sink=False)
            assert formats is not None
            topic = "bench-avro"
            schema_id = RegistryClient(formats.registry).register(
                f"{topic}-value", json.dumps(SCHEMA), "AVRO"
            )
            values = framed(schema_id, payloads)
            kafka.create_topic(topic, partitions=PARTITIONS)
            for lo in range(0, RECORDS, 100_000):
                rows = range(lo, min(RECORDS, lo + 100_000))
                kafka.produce(topic, [(i % PARTITIONS, None, values[i], None, None) for i in rows])
            results = run_rounds(jar, values, schema_id, kafka.bootstrap_servers, topic, registry)
    report(results)


def run_rounds(
    jar: Path, values: list[bytes], schema_id: int, bootstrap: str, topic: str, registry: Any
) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        "ours_decode_s": [],
        "spark_decode_s": [],
        "spark_scan_s": [],
        "ours_e2e_s": [],
        "spark_e2e_s": [],
    }
    spark = local_spark("bench-registry-avro", cores=2, **{"spark.jars": str(jar)})
    end_to_end(spark, bootstrap, topic, registry, ours=True)  # warm-up: workers, imports
    end_to_end(spark, bootstrap, topic, registry, ours=False)
    for _ in range(ROUNDS):
        results["ours_decode_s"].append(ours_decode_only(values, schema_id))
        with_avro, without = spark_decode_only(spark, values)
        results["spark_decode_s"].append(with_avro)
        results["spark_scan_s"].append(without)
        results["ours_e2e_s"].append(end_to_end(spark, bootstrap, topic, registry, ours=True))
        results["spark_e2e_s"].append(end_to_end(spark, bootstrap, topic, registry, ours=False))
    spark.stop()
    return results


def report(results: dict[str, list[float]]) -> None:
    median = {k: statistics.median(v) for k, v in results.items()}
    ours = RECORDS / median["ours_decode_s"]
    spark_net = RECORDS / max(median["spark_decode_s"] - median["spark_scan_s"], 1e-9)
    spark_gross = RECORDS / median["spark_decode_s"]
    e2e_ours = RECORDS / median["ours_e2e_s"]
    e2e_spark = RECORDS / median["spark_e2e_s"]
    figures = {
        "records": RECORDS,
        "fields": len(FIELDS),
        "rounds": ROUNDS,
        "decode_only_records_per_s": {
            "ours": round(ours),
            "spark_from_avro_net_of_scan": round(spark_net),
            "spark_from_avro_query": round(spark_gross),
        },
        "decode_only_ratio_ours_over_spark_net": round(ours / spark_net, 2),
        "decode_only_ratio_ours_over_spark_query": round(ours / spark_gross, 2),
        "end_to_end_records_per_s": {"ours": round(e2e_ours), "spark_from_avro": round(e2e_spark)},
        "end_to_end_ratio_ours_over_spark": round(e2e_ours / e2e_spark, 2),
        "seconds": results,
    }
    print(json.dumps(figures, indent=2))
    write_results("registry_avro", figures)


if __name__ == "__main__":
    main()
