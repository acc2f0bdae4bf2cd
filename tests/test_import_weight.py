"""What each Python process Spark starts for us imports: a bounded set of packages.

Spark starts a fresh Python process (or forks one from its daemon) to look up data sources
(``import pyspark_unaligned``), to create the data source and ask for its schema, to run the
source (the stream reader), to pickle the stream reader into the read tasks, to plan each
write (the stream writer, with recovery), and to run each commit (the pickled writer). Each
case below runs one of those entry points in a fresh interpreter, which prints the top-level
packages it loaded; the test fails when a package the process does not need shows up (pandas
never: pyarrow imports it as soon as an array is built from Python values or numpy).
The lists, not a timing, are the bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Heavy third-party packages, each a few tens to hundreds of milliseconds to import.
HEAVY = ("pandas", "numpy", "pyarrow", "kafka", "fastavro", "dateutil", "pytz")
#: Processes that only name, create or describe the data source need none of them.
NOTHING_HEAVY = frozenset(HEAVY)
#: The source runner reads Kafka (and Spark's runner itself imports pyarrow): no Avro, no pandas.
SOURCE_RUNNER = frozenset({"pandas", "fastavro", "dateutil", "pytz"})
#: The planner and commit runner of the file sink touch no Kafka and no channel-state codec.
FILE_SINK_DRIVER = frozenset({"pandas", "fastavro", "kafka", "dateutil", "pytz"})
#: The Kafka sink's planner and commit runner speak Kafka, never Avro or pandas.
KAFKA_SINK_DRIVER = frozenset({"pandas", "fastavro", "dateutil", "pytz"})

KAFKA_READ = {"subscribe": "events", "kafka.bootstrap.servers": "127.0.0.1:1"}

PRELUDE = """
import json, sys
before = set(sys.modules)
"""
REPORT = """
loaded = sorted({m.split(".")[0] for m in set(sys.modules) - before})
print(json.dumps(loaded))
print(json.dumps(sorted(set(sys.modules) - before)))
"""
#: Modules only a sink task needs: Spark's planner and commit runner never load them.
SINK_TASK_ONLY = frozenset(
    {
        "unaligned.sink.topics.kafka_task_writer",
        "unaligned.kafka.produce.produce_session",
        "pyarrow.compute",
    }
)


def loaded_packages(code: str, *, module_name: str = "__main__") -> set[str]:
    """Top-level packages ``code`` loads in a fresh interpreter (run as module ``module_name``,
    which is how :mod:`unaligned.sink.writer_role` tells Spark's planner from other callers)."""
    body = textwrap.dedent(code)
    script = PRELUDE + f"exec({body!r}, {{'__name__': {module_name!r}}})\n" + REPORT
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-2]))


def loaded_modules(code: str) -> set[str]:
    """Every module (full name) ``code`` loads in a fresh interpreter."""
    script = PRELUDE + f"exec({textwrap.dedent(code)!r}, {{'__name__': '__main__'}})\n" + REPORT
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_lookup_imports_nothing_heavy() -> None:
    loaded = loaded_packages("import pyspark_unaligned")
    assert "unaligned" in loaded
    assert loaded & NOTHING_HEAVY == set()


def test_create_data_source_and_schema_import_nothing_heavy() -> None:
    loaded = loaded_packages(
        f"""
        from unaligned.data_source import UnalignedDataSource
        source = UnalignedDataSource({KAFKA_READ!r})
        assert source.schema().fieldNames()[0] == "key"
        """
    )
    assert loaded & NOTHING_HEAVY == set()


def test_public_helpers_load_on_first_use() -> None:
    loaded = loaded_packages("import unaligned; assert callable(unaligned.await_finished)")
    assert "pyarrow" in loaded  # the finishing helpers read the checkpoint through pyarrow.fs
    assert loaded & {"pandas", "kafka", "fastavro"} == set()


#: The read planner builds the stream reader and pickles it: no Kafka client, no Avro, no pandas.
READ_PLANNER = frozenset({"pandas", "fastavro", "kafka", "dateutil", "pytz"})


def test_the_read_planner_building_and_pickling_the_stream_reader_imports_no_kafka() -> None:
    loaded = loaded_packages(
        f"""
        from pyspark import cloudpickle
        from unaligned.data_source import UnalignedDataSource
        source = UnalignedDataSource({KAFKA_READ!r})
        cloudpickle.dumps(source.streamReader(source.schema()))
        """
    )
    assert "unaligned" in loaded
    assert loaded & READ_PLANNER == set()


def test_the_source_runner_imports_no_avro_or_pandas() -> None:
    loaded = loaded_packages(
        f"""
        from unaligned.data_source import UnalignedDataSource
        source = UnalignedDataSource({KAFKA_READ!r})
        source.streamReader(source.schema()).getDefaultReadLimit()  # builds the driver side
        """
    )
    assert "kafka" in loaded
    assert loaded & SOURCE_RUNNER == set()


def write_checkpoint(tmp_path: Path) -> str:
    (tmp_path / "metadata").write_text(json.dumps({"id": "query-1"}) + "\n")
    return str(tmp_path)


def test_file_sink_planner_with_recovery_imports_no_kafka_avro_or_pandas(tmp_path: Path) -> None:
    options = {"path": str(tmp_path / "out"), "checkpointLocation": write_checkpoint(tmp_path)}
    loaded = loaded_packages(
        f"""
        from pyspark.sql.types import BinaryType, StructField, StructType
        from unaligned.data_source import UnalignedDataSource
        from unaligned.sink.writer_role import WriterRole, writer_role
        assert writer_role() is WriterRole.PLANNER  # so streamWriter runs recovery
        schema = StructType([StructField("value", BinaryType(), True)])
        UnalignedDataSource({options!r}).streamWriter(schema, False)
        """,
        module_name="pyspark.sql.worker.write_into_data_source",  # the planner: recovery runs
    )
    assert "pyarrow" in loaded
    assert loaded & FILE_SINK_DRIVER == set()


@pytest.fixture()
def pickled_kafka_writer(tmp_path: Path) -> Path:
    """A Kafka sink's writer as Spark pickles it for the commit runner (built in a fresh
    interpreter, as Spark's planner does; no broker is needed until it commits)."""
    options = {
        "kafka.bootstrap.servers": "127.0.0.1:1",
        "topic": "out",
        "checkpointLocation": write_checkpoint(tmp_path),
    }
    blob = tmp_path / "writer.pickle"
    loaded = loaded_packages(
        f"""
        import pickle
        from pyspark.sql.types import BinaryType, StructField, StructType
        from unaligned.data_source import UnalignedDataSource
        schema = StructType([StructField("value", BinaryType(), True)])
        writer = UnalignedDataSource({options!r}).streamWriter(schema, False)
        open({str(blob)!r}, "wb").write(pickle.dumps(writer))
        """
    )
    assert loaded & KAFKA_SINK_DRIVER == set()
    return blob


def test_commit_runner_unpickling_the_kafka_writer_imports_no_avro_or_pandas(
    pickled_kafka_writer: Path,
) -> None:
    loaded = loaded_packages(
        f"""
        import pickle
        writer = pickle.loads(open({str(pickled_kafka_writer)!r}, "rb").read())
        assert type(writer).__name__ == "TwoPhaseCommitWriter"
        """
    )
    assert "kafka" in loaded
    assert loaded & KAFKA_SINK_DRIVER == set()
    modules = loaded_modules(
        f"""
        import pickle
        writer = pickle.loads(open({str(pickled_kafka_writer)!r}, "rb").read())
        """
    )
    assert modules & SINK_TASK_ONLY == set()


def test_read_task_conversion_imports_no_pandas() -> None:
    """A read task's own Arrow work (decoded columns -> Spark's batches) wraps numpy buffers:
    ``pa.array`` would import pandas. Inputs are built from buffers as the decoder builds them."""
    loaded = loaded_packages(
        """
        import numpy as np
        import pyarrow as pa
        from unaligned.kafka.partitions import TopicPartitionId
        from unaligned.kafka.records.record_columns import RecordColumns
        from unaligned.source.arrow_rows import to_arrow_batches

        def binary(n):
            offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32))
            return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(b"k" * n)])

        n = 6
        columns = RecordColumns(
            offsets=np.arange(n, dtype=np.int64),
            timestamps_ms=np.full(n, 1_700_000_000_000, np.int64),
            timestamp_types=np.zeros(n, np.int32),
            keys=binary(n),
            values=binary(n),
            headers=None,
        )
        (batch,) = to_arrow_batches(columns, [(TopicPartitionId("t", 1), n)], False)
        batch.validate(full=True)
        assert batch.num_rows == n
        """
    )
    assert "pyarrow" in loaded
    assert "pandas" not in loaded


def test_sink_routing_imports_no_pandas() -> None:
    """A sink task's routing of a chunk: keys hashed (murmur2), a partition column with nulls,
    and a keyless chunk; inputs built from buffers, as Spark hands them over."""
    loaded = loaded_packages(
        """
        import numpy as np
        import pyarrow as pa
        from unaligned.kafka.produce.row_routing import route_rows

        n = 6
        offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32))
        keys = pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(b"abcdef")])
        named = np.packbits(np.array([1, 0, 1, 1, 0, 1], bool), bitorder="little")
        values = pa.py_buffer(np.array([0, 9, 1, 2, 9, 0], np.int32))
        partitions = pa.Array.from_buffers(
            pa.int32(), n, [pa.py_buffer(named), values], null_count=2
        )
        groups = route_rows("out", keys, partitions, n, lambda topic: 3, {})
        assert sorted(r for g in groups for r in g.rows) == list(range(n))
        assert {g.partition for g in groups if 2 in g.rows} == {1}
        assert len(route_rows("out", None, None, n, lambda topic: 3, {})) == 1
        """
    )
    assert "pyarrow" in loaded
    assert "pandas" not in loaded


def test_mapping_an_avro_reader_schema_imports_nothing_heavy() -> None:
    """With ``valueFormat=avro-confluent``, ``schema()`` also resolves the reader schema (stdlib
    HTTP) and maps it to Spark types: still no numpy, pyarrow or fastavro in that process."""
    loaded = loaded_packages(
        """
        from unaligned.data_source import UnalignedDataSource
        from unaligned.kafka.records.source_schema import kafka_source_schema
        from unaligned.registry.connection.client import RegisteredSchema
        from unaligned.registry.options import parse_formats
        from unaligned.registry.record_decoding import RecordDecoding
        from unaligned.registry.connection.schemas import ColumnReading, ResolvedSchema
        from unaligned.source.options import SourceOptions

        options = SourceOptions.parse({
            "subscribe": "events", "kafka.bootstrap.servers": "127.0.0.1:1",
            "valueFormat": "avro-confluent", "schema.registry.url": "http://127.0.0.1:1",
        })
        text = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}'
        reader = ResolvedSchema(RegisteredSchema(1, "AVRO", text))
        decoding = RecordDecoding(options.formats, (ColumnReading(options.formats.value, reader),))
        schema = decoding.output_schema(kafka_source_schema(False))
        assert schema["value"].dataType.simpleString() == "struct<a:bigint>"
        """
    )
    assert loaded & NOTHING_HEAVY == set()


def test_a_task_reads_no_package_metadata() -> None:
    """crc32c 2.9 reads its own package metadata at import (``importlib.metadata``), which
    scans every zip on ``sys.path``: 50-60 ms in a Spark Python worker, whose path starts with
    ``pyspark.zip``, in each process that imports kafka-python. setup.cfg keeps it below 2.9."""
    loaded = loaded_modules(
        """
        import unaligned.source.partition_reader
        import unaligned.sink.topics.kafka_task_writer
        """
    )
    assert "crc32c" in loaded
    assert "importlib.metadata" not in loaded
