"""Helpers shared by the end-to-end tests (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from unaligned._util.fs import resolve_location
from unaligned.kafka.transactions import transaction_coordinator
from unaligned.sink.files.committed_files import read_committed_files
from unaligned.sink.files.file_manifest import MANIFEST_DIR, STAGING_DIR
from unaligned.sink.files.spark_metadata_log import LogSettings, SparkMetadataLog
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_items import prepared_from_json
from unaligned.sink.topics.kafka_task_writer import KafkaTaskWriter
from unaligned.testing import EmbeddedKafka


def kafka_stream(spark: Any, kafka: EmbeddedKafka, topic: str, **options: str) -> Any:
    """``spark.readStream.format("unaligned")`` on ``topic`` from the earliest offsets."""
    reader = (
        spark.readStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def wait_for_query(query: Any, condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll ``condition`` while ``query`` runs; fail naming ``what`` if the query stops first or
    ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert query.isActive, f"the query stopped before {what}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def produce_skewed(
    kafka: EmbeddedKafka,
    topic: str,
    counts: Sequence[int],
    value_bytes: int = 1000,
) -> dict[int, list[bytes]]:
    """Produce ``counts[p]`` records of ``value_bytes`` bytes to partition ``p`` of ``topic``
    (keys cycle over 7 values) and return the values per partition, in order: the skewed input
    the unaligned-barrier tests throttle (partition 0 is usually the hot one)."""
    expected: dict[int, list[bytes]] = {}
    records = []
    for partition, count in enumerate(counts):
        values = [f"p{partition}-{i:05d}-".encode().ljust(value_bytes, b"x") for i in range(count)]
        expected[partition] = values
        records += [(partition, f"k{i % 7}".encode(), v, None, None) for i, v in enumerate(values)]
    kafka.produce(topic, records)
    return expected


def committed_values(output: Path) -> dict[int, list[bytes]]:
    """The values the file sink committed under ``output``, per ``partition`` column, in order."""
    table = read_committed_files(str(output))
    got: dict[int, list[bytes]] = defaultdict(list)
    for partition, value in zip(
        table.column("partition").to_pylist(), table.column("value").to_pylist(), strict=True
    ):
        got[partition].append(value)
    return dict(got)


def assert_no_stray_files(output: Path) -> None:
    """No staged file is left under the file sink's ``output``, every data file is one the
    manifest names, and ``_spark_metadata`` (what Spark's readers read) names each once."""
    staged = [f for f in (output / STAGING_DIR).rglob("*") if f.is_file()]
    assert staged == [], f"staging files left: {staged}"
    listed = set()
    for entry in (output / MANIFEST_DIR).glob("*.json"):
        listed.update(f["path"] for f in json.loads(entry.read_text())["files"])
    data_files = {f.name for f in output.glob("*.parquet")}
    assert data_files == listed, f"data files not in the manifest: {sorted(data_files - listed)}"
    log = SparkMetadataLog(resolve_location(str(output)), "", LogSettings())
    logged = sorted(str(line["path"]).rsplit("/", 1)[1] for line in log.all_lines())
    assert logged == sorted(data_files), "_spark_metadata does not name each data file once"


def kcat_read_committed(bootstrap_servers: str, topic: str) -> list[dict[str, Any]]:
    """Every committed record of ``topic`` as read by ``kcat`` (librdkafka: a reader
    independent of kafka-python) with ``isolation.level=read_committed``, up to the end.

    Each record: ``partition``, ``offset``, ``key`` and ``value`` (``str`` or ``None``), and
    ``headers`` as a list of ``(key, value)`` string pairs in record order.
    """
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap_servers, "-t", topic, "-e", "-q", "-J"]
        + ["-X", "isolation.level=read_committed"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    records = []
    for line in out.splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        flat = raw.get("headers") or []
        records.append(
            {
                "partition": raw["partition"],
                "offset": raw["offset"],
                "key": raw.get("key"),
                "value": raw.get("payload"),
                "headers": list(zip(flat[::2], flat[1::2], strict=True)),
            }
        )
    return records


def write_one_transaction(
    target: KafkaTarget, schema: Any, chunks: Sequence[Any], prefix: str
) -> tuple[KafkaTaskWriter, int]:
    """One sink task's transaction over ``chunks`` (Arrow batches of ``schema``) under
    transactional-id prefix ``prefix``: written, prepared (aborted if that fails), then
    committed from its handle as the driver does; the writer and the records it wrote."""
    writer = KafkaTaskWriter(
        target, kafka_columns(schema, target), target.client_kwargs(), prefix, 0
    )
    try:
        writer.begin()
        for chunk in chunks:
            writer.write_chunk(chunk)
            writer.between_chunks()
        item = writer.prepare()
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()
    transaction_coordinator.commit_prepared(target.client_kwargs(), prepared_from_json(item))
    return writer, int(item["recordCount"])
