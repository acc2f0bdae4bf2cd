"""The Iceberg and Delta targets' options: parsed as users know them, the wrong ones refused."""

from __future__ import annotations

from typing import Any

import pytest

from unaligned.errors import OptionError
from unaligned.sink.options import SinkOptions
from unaligned.sink.table_target import PartitionField, TableFormat, TableTarget

CHECKPOINT = {"checkpointlocation": "/tmp/ck"}
DELTA = {**CHECKPOINT, "tableformat": "delta", "path": "/data/events"}
ICEBERG = {**CHECKPOINT, "tableformat": "iceberg", "path": "db.events", "catalog.warehouse": "/wh"}


def _target(options: dict[str, str]) -> TableTarget:
    target = SinkOptions.parse(options).target
    assert isinstance(target, TableTarget)
    return target


def test_delta_target_takes_its_location_and_storage_options() -> None:
    target = _target(
        {**DELTA, "partitionby": "country, day", "mergeschema": "true", "storage.aws_region": "x"}
    )
    assert target.format is TableFormat.DELTA
    assert target.location == "/data/events"
    assert target.partition_by == (PartitionField("country"), PartitionField("day"))
    assert target.merge_schema is True
    assert target.options == {"AWS_REGION": "x"}
    assert target.compression == "snappy"


def test_iceberg_default_catalog_is_embedded_sqlite_under_the_warehouse() -> None:
    target = _target(ICEBERG)
    assert target.location == "db.events"
    assert target.options == {
        "type": "sql",
        "uri": "sqlite:////wh/unaligned-catalog.db",
        "warehouse": "file:///wh",
    }


def test_iceberg_rest_catalog_properties_pass_through() -> None:
    target = _target(
        {
            **CHECKPOINT,
            "tableformat": "iceberg",
            "path": "db.events",
            "catalog.type": "rest",
            "catalog.uri": "http://127.0.0.1:8181",
            "catalog.s3.endpoint": "http://127.0.0.1:9000",
            "catalog.name": "prod",
            "snapshot-property.owner": "etl",
        }
    )
    assert target.catalog_name == "prod"
    assert target.options == {
        "type": "rest",
        "uri": "http://127.0.0.1:8181",
        "s3.endpoint": "http://127.0.0.1:9000",
    }
    assert dict(target.snapshot_properties) == {"owner": "etl"}


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        ("day(ts)", (PartitionField("ts", "day"),)),
        ("days(ts), id", (PartitionField("ts", "day"), PartitionField("id"))),
        (
            "bucket(16, id),truncate(4, name)",
            (PartitionField("id", "bucket", 16), PartitionField("name", "truncate", 4)),
        ),
        ("identity(country), hours(ts)", (PartitionField("country"), PartitionField("ts", "hour"))),
    ],
)
def test_iceberg_partition_transforms(raw: str, fields: tuple[PartitionField, ...]) -> None:
    assert _target({**ICEBERG, "partitionby": raw}).partition_by == fields


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**DELTA, "partitionby": "day(ts)"}, "Delta tables are partitioned by columns' values"),
        ({**ICEBERG, "partitionby": "day(ts"}, "cannot read"),
        ({**ICEBERG, "partitionby": "a, a"}, "names 'a' twice"),
        ({**DELTA, "catalog.uri": "x"}, "'catalog.uri' applies to the Iceberg sink only"),
        ({**ICEBERG, "storage.aws_region": "x"}, "applies to the Delta sink only"),
        ({**ICEBERG, "usermetadata": "x"}, "applies to the Delta sink only"),
        ({**DELTA, "keepsnapshots": "5"}, "applies to the Iceberg sink only"),
        ({**ICEBERG, "keepsnapshots": "0"}, "'keepSnapshots' must be a whole number"),
        ({**ICEBERG, "keepsnapshots": "many"}, "'keepSnapshots' must be a whole number"),
        ({**DELTA, "retention": "1h"}, "option 'retention' applies to the file sink only"),
        ({**DELTA, "mergefilesbelow": "1MB"}, "'mergeFilesBelow' applies to the file sink only"),
        ({**DELTA, "topic": "t"}, "'topic' applies to the Kafka sink only"),
        ({**DELTA, "kafka.bootstrap.servers": "h:1"}, "applies to the Kafka sink only"),
        ({**DELTA, "mergeschema": "true", "merge-schema": "false"}, "disagree"),
        ({**CHECKPOINT, "tableformat": "delta"}, "needs option 'path'"),
        ({**CHECKPOINT, "tableformat": "iceberg", "path": "events"}, "'namespace.table'"),
        ({**CHECKPOINT, "tableformat": "iceberg", "path": "db.t"}, "catalog.warehouse"),
        ({**ICEBERG, "catalog.warehouse": "s3://b/wh"}, "must then be a local path"),
        ({**CHECKPOINT, "path": "/out", "catalog.uri": "x"}, "Iceberg and Delta sinks only"),
        (
            {**CHECKPOINT, "path": "/out", "partitionby": "a"},
            "'partitionBy' applies to the Iceberg",
        ),
    ],
)
def test_wrong_or_conflicting_options_are_refused_by_name(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(OptionError, match=message):  # SinkConfigurationError is one
        SinkOptions.parse(options)


def test_an_unknown_table_format_is_refused() -> None:
    with pytest.raises(OptionError, match="tableFormat"):
        SinkOptions.parse({**DELTA, "tableformat": "hudi"})


def test_catalog_and_storage_secrets_stay_out_of_reprs() -> None:
    iceberg = _target({**ICEBERG, "catalog.s3.secret-access-key": "hunter2"})
    delta = _target({**DELTA, "storage.aws_secret_access_key": "hunter2"})
    for target in (iceberg, delta):
        assert "hunter2" not in repr(target)
        assert "hunter2" not in target.describe()
