"""A Schema Registry that goes down while queries run: records whose writer schema id the query
has not seen cannot be decoded, and that is an outage, not bad data. In both modes the read is
retried within ``schema.registry.request.timeout.ms`` and then the task (and the query) fails;
no record becomes an error row (a dead-letter route would swallow good data)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness import wait_for_query
from test_registry_formats import V1, V2, confluent_avro, customer, registry_client
from unaligned.testing import EmbeddedKafka
from unaligned.testing.registry_server import RegistryServer


def test_an_unseen_schema_id_during_an_outage_fails_the_query_in_both_modes(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic()
    with RegistryServer(tmp_path / "registry") as own:
        client = registry_client(own)
        first = client.register(f"{topic}-value", json.dumps(V1), "AVRO")
        kafka.produce(
            topic,
            [(0, None, confluent_avro(first, V1, customer(i, 1)), None, None) for i in range(5)],
        )
        queries = {}
        for mode in ("PERMISSIVE", "FAILFAST"):
            stream = (
                spark.readStream.format("unaligned")
                .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("valueFormat", "avro-confluent")
                .option("mode", mode)
                .option("schema.registry.request.timeout.ms", "3000")
                .options(**own.options())
                .load()
            )
            columns = ["value.id"] + (["valueError"] if mode == "PERMISSIVE" else [])
            queries[mode] = (
                stream.select(*columns)
                .writeStream.format("memory")
                .queryName(f"outage_{mode.lower()}")
                .option("checkpointLocation", str(tmp_path / mode))
                .trigger(processingTime="500 milliseconds")
                .start()
            )
        try:
            for mode, query in queries.items():
                table = f"outage_{mode.lower()}"
                wait_for_query(query, lambda t=table: _count(spark, t) == 5, f"{mode}: 5 rows", 120)
            # a new writer schema the queries have not seen, then the registry goes away
            second = client.register(f"{topic}-value", json.dumps(V2), "AVRO")
            own.stop()
            began = time.monotonic()
            kafka.produce(
                topic,
                [
                    (0, None, confluent_avro(second, V2, customer(i, 2)), None, None)
                    for i in range(5, 10)
                ],
            )
            for mode, query in queries.items():
                with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's wrapper
                    query.awaitTermination(180)
                assert not query.isActive, f"{mode}: the query should have failed"
                failure = str(failed.value)
                assert "could not be reached" in failure, failure
                assert "schema.registry.request.timeout.ms=3000" in failure
            assert time.monotonic() - began >= 3
        finally:
            for query in queries.values():
                query.stop()
    permissive = spark.sql("SELECT id, valueError FROM outage_permissive").collect()
    assert sorted(r.id for r in permissive) == list(range(5))
    assert all(r.valueError is None for r in permissive)
    assert spark.sql("SELECT count(*) FROM outage_failfast").first()[0] == 5


def _count(spark: Any, table: str) -> int:
    return int(spark.sql(f"SELECT count(*) FROM {table}").first()[0])
