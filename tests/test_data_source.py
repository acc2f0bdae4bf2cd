"""format("unaligned"): the one DataSource class dispatches to the Kafka source, the 2PC sink and
the committed-files reader. Options arrive as Spark hands them over (a CaseInsensitiveDict, keys
lower-cased); no Spark session, and nothing may reach Kafka: the bootstrap servers point at a
closed loopback port."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import LongType, StructField, StructType

import pyspark_unaligned
import unaligned
from unaligned.data_source import FORMAT_NAME, UnalignedDataSource
from unaligned.errors import CommitLogError, OptionError, SinkConfigurationError
from unaligned.sink.commit_log import CommitRecord
from unaligned.sink.files.committed_files import CommittedFilesReader
from unaligned.sink.files.file_participant import FileParticipant
from unaligned.sink.options import FileTarget
from unaligned.sink.two_phase_commit import TwoPhaseCommitWriter
from unaligned.source.batch_reader import KafkaBatchReader
from unaligned.source.position_options import EarliestStart, LatestEnd
from unaligned.source.stream_reader import KafkaStreamReader

CLOSED_PORT = "127.0.0.1:1"
KAFKA = {"kafka.bootstrap.servers": CLOSED_PORT, "subscribe": "events"}
SPARK_KAFKA_COLUMNS = (
    "key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
    "timestampType:int"
)
FILE_SCHEMA = StructType([StructField("id", LongType(), False)])


def source(options: Mapping[str, str]) -> UnalignedDataSource:
    return UnalignedDataSource(CaseInsensitiveDict(options))


def commit_files(out: Path, ids: list[int]) -> None:
    """One batch committed by the file sink's participant (what the file sink leaves behind)."""
    participant = FileParticipant(FileTarget(str(out), "snappy"), FILE_SCHEMA, "q-1")
    task = participant.open_task(0, 0, 0)
    arrow = pa.schema([pa.field("id", pa.int64(), False)])
    task.write_chunk(pa.record_batch([pa.array(ids, pa.int64())], schema=arrow))
    items = [task.prepare()]
    participant.commit(items, 0, lambda n: None)
    participant.finish_batch(CommitRecord(0, "files", tuple(items), 0))


# --- name and registration --------------------------------------------------------------------


def test_format_name_is_unaligned() -> None:
    assert UnalignedDataSource.name() == FORMAT_NAME == "unaligned"


def test_auto_registration_hook_exposes_the_data_source() -> None:
    # Spark imports pyspark_* modules and registers their DefaultSource under its name().
    assert pyspark_unaligned.DefaultSource is UnalignedDataSource
    assert unaligned.UnalignedDataSource is UnalignedDataSource


# --- the Kafka source -------------------------------------------------------------------------


def test_source_schema_is_sparks_kafka_schema_without_headers() -> None:
    schema = source(KAFKA).schema()
    assert schema.simpleString() == f"struct<{SPARK_KAFKA_COLUMNS}>"
    assert all(field.nullable for field in schema.fields)


@pytest.mark.parametrize("key", ["includeHeaders", "INCLUDEHEADERS", "includeheaders"])
def test_source_schema_with_headers_appends_the_headers_column(key: str) -> None:
    schema = source({**KAFKA, key: "true"}).schema()
    assert schema.simpleString() == (
        f"struct<{SPARK_KAFKA_COLUMNS},headers:array<struct<key:string,value:binary>>>"
    )
    assert source({**KAFKA, key: "false"}).schema() == source(KAFKA).schema()


def test_unknown_source_option_is_named_by_schema_and_stream_reader() -> None:
    ds = source({**KAFKA, "fetchMaxBytez": "1"})
    for call in (ds.schema, lambda: ds.streamReader(StructType())):
        with pytest.raises(OptionError, match="(?i)unknown option 'fetchMaxBytez'"):
            call()


def test_malformed_source_option_is_named() -> None:
    with pytest.raises(OptionError, match="includeHeaders"):
        source({**KAFKA, "includeHeaders": "yes"}).schema()


def test_source_without_a_subscription_says_which_options_are_missing() -> None:
    with pytest.raises(OptionError, match="subscribe, subscribePattern, assign"):
        source({"kafka.bootstrap.servers": CLOSED_PORT}).schema()
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        source({"subscribe": "events"}).schema()


def test_a_path_next_to_a_subscription_is_not_a_file_read() -> None:
    # Files are read only without subscribe/subscribePattern/assign; with one, the Kafka source
    # parses the options and names the stray one.
    with pytest.raises(OptionError, match="unknown option 'path'"):
        source({**KAFKA, "path": "/somewhere"}).schema()


def test_stream_reader_is_built_without_contacting_kafka_and_pickles() -> None:
    reader = source({**KAFKA, "includeHeaders": "true", "maxOffsetsPerTrigger": "10"}).streamReader(
        StructType()
    )
    assert isinstance(reader, KafkaStreamReader)
    # Spark pickles the reader into every read task: it must survive the round trip.
    copy = pickle.loads(pickle.dumps(reader))
    assert isinstance(copy, KafkaStreamReader)


# --- the sink ----------------------------------------------------------------------------------


def test_file_sink_writer_is_built_and_pickles(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "metadata").write_text('{"id":"q-1"}')
    writer = source(
        {"checkpointLocation": str(tmp_path / "ck"), "path": str(tmp_path / "out")}
    ).streamWriter(FILE_SCHEMA, False)
    assert isinstance(writer, TwoPhaseCommitWriter)
    assert isinstance(pickle.loads(pickle.dumps(writer)), TwoPhaseCommitWriter)


def test_sink_without_checkpoint_location_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigurationError, match="checkpointLocation"):
        source({"path": str(tmp_path / "out")}).streamWriter(FILE_SCHEMA, False)


def test_sink_with_two_targets_names_both(tmp_path: Path) -> None:
    options = {
        "checkpointLocation": str(tmp_path / "ck"),
        "path": str(tmp_path / "out"),
        "topic": "t",
    }
    with pytest.raises(SinkConfigurationError, match=r"option 'path' .*topic"):
        source(options).streamWriter(FILE_SCHEMA, False)


def test_sink_without_a_target_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigurationError, match="kafka.bootstrap.servers"):
        source({"checkpointLocation": str(tmp_path / "ck")}).streamWriter(FILE_SCHEMA, False)


# --- the committed-files batch reader ------------------------------------------------------------


def test_batch_read_of_a_path_reads_what_the_file_sink_committed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    commit_files(out, [3, 1, 2])
    ds = source({"path": str(out)})
    schema = ds.schema()
    assert schema == FILE_SCHEMA
    reader = ds.reader(schema)
    assert isinstance(reader, CommittedFilesReader)
    ids = [
        i
        for partition in reader.partitions()
        for batch in reader.read(partition)
        for i in batch.column("id").to_pylist()
    ]
    assert sorted(ids) == [1, 2, 3]


def test_batch_read_of_a_path_with_nothing_committed_names_the_path(tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    with pytest.raises(CommitLogError, match="nothing-here"):
        source({"path": str(empty)}).schema()


def test_batch_read_of_kafka_is_a_bounded_kafka_read_with_batch_defaults() -> None:
    ds = source(KAFKA)
    reader = ds.reader(ds.schema())
    assert isinstance(reader, KafkaBatchReader)
    options = reader._options
    assert isinstance(options.starting, EarliestStart)
    assert isinstance(options.ending, LatestEnd)
    pickle.loads(pickle.dumps(reader))  # Spark ships it to the executors


def test_batch_read_of_kafka_refuses_a_latest_start() -> None:
    ds = source({**KAFKA, "startingOffsets": "latest"})
    with pytest.raises(OptionError, match="'startingOffsets' cannot be 'latest' in a batch"):
        ds.reader(ds.schema())


def test_a_kafka_read_with_a_path_too_is_a_kafka_read_that_refuses_the_path() -> None:
    ds = source({**KAFKA, "path": "/somewhere"})
    with pytest.raises(OptionError, match="unknown option 'path'"):
        ds.reader(StructType())


def test_batch_read_without_a_path_asks_for_one() -> None:
    with pytest.raises(OptionError, match="needs option 'path'"):
        source({}).reader(StructType())
