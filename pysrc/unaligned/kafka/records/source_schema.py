"""Spark's Kafka source schema as a Spark ``StructType`` (pyspark types only).

Schema (exactly Spark's Kafka source schema; every field nullable, as Spark declares them)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key string, value binary>>]

``headers`` is null for a record without headers (as in Spark). ``timestampType`` is Kafka's
id: 0 CreateTime, 1 LogAppendTime. Kept apart from :mod:`unaligned.kafka.records.record_columns`
(numpy, pyarrow) so that the process Spark starts to create the data source and ask for its schema
imports neither.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def kafka_source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (all fields nullable, as Spark's)."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        header = StructType(
            [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
        )
        fields.append(StructField("headers", ArrayType(header, True), True))
    return StructType(fields)
