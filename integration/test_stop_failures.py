"""A stop that cannot complete says so (issue 21, item 1): ``unaligned.stop`` re-raises the
exception of a query that fails during its drain and keeps the request for the next run, which
drains exactly once; ``unaligned stop`` tells a query that is not running within seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

import unaligned
from harness import kafka_stream, wait_until
from unaligned.checkpoint import Checkpoint
from unaligned.finishing import finished_batch
from unaligned.finishing.heartbeat import beating
from unaligned.finishing.stop_request import read_request
from unaligned.testing import EmbeddedKafka

RECORDS = 3000


def _failing_after(flag: Path) -> Any:
    """``value`` as it is, until ``flag`` exists: then every row raises."""
    path = str(flag)

    def check(value: bytes) -> bytes:
        if os.path.exists(path):
            raise RuntimeError("the transformation broke during the drain")
        return value

    return F.udf(check, BinaryType())


def test_a_query_failing_during_its_drain_raises_from_stop_and_the_next_run_drains(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic, output = new_topic(partitions=2), new_topic(partitions=2)
    kafka.produce(topic, [(i % 2, None, b"v%05d" % i, None, None) for i in range(RECORDS)])
    checkpoint = str(tmp_path / "checkpoint")
    flag = tmp_path / "break-now"

    def writer(broken: bool) -> Any:
        df = kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="300")
        value = _failing_after(flag)("value") if broken else F.col("value")
        return (
            df.select(F.col("partition"), value.alias("value"))
            .writeStream.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", output)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="2 seconds")
        )

    query = writer(broken=True).start()
    try:
        wait_until(lambda: (Path(checkpoint) / "commits" / "0").exists(), "batch 0", 120)
        wait_until(lambda: beating(Checkpoint.resolve(checkpoint)), "the source's heartbeat", 60)
        flag.touch()
        with pytest.raises(StreamingQueryException) as raised:
            unaligned.stop(query, checkpoint, drain=True, timeout_s=240)
    finally:
        if query.isActive:
            query.stop()
    assert "the transformation broke during the drain" in str(raised.value)
    kept = read_request(Checkpoint.resolve(checkpoint))
    assert kept is not None and kept.drain and kept.honoured_by is None
    assert finished_batch(Checkpoint.resolve(checkpoint)) is None
    read_so_far = len(kafka.consume_all(output, read_committed=True))
    assert read_so_far < RECORDS

    # Stopping it again now fails at once with its own exception, and requests nothing new.
    with pytest.raises(StreamingQueryException, match="broke during the drain"):
        unaligned.stop(query, checkpoint, drain=True, timeout_s=240)
    assert read_request(Checkpoint.resolve(checkpoint)) == kept

    # The next run honours the recorded drain: a processing-time query that ends by itself.
    again = writer(broken=False).start()
    try:
        assert unaligned.await_finished(again, checkpoint, timeout_s=240)
    finally:
        if again.isActive:
            again.stop()
    assert finished_batch(Checkpoint.resolve(checkpoint)) is not None
    values = sorted(r.value for r in kafka.consume_all(output, read_committed=True))
    assert values == sorted(b"v%05d" % i for i in range(RECORDS))  # none lost, none twice
    assert kafka.last_stable_offsets(output) == kafka.end_offsets(output)

    # The CLI against the stopped query: "not running" within seconds, not after --timeout.
    cli = subprocess.run(
        [sys.executable, "-m", "unaligned.cli", "stop", checkpoint, "--drain", "--timeout", "200"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 4, cli.stderr
    assert "unaligned stop: the query is not running: its source's heartbeat" in cli.stderr
    assert "the request was withdrawn" in cli.stderr
    assert read_request(Checkpoint.resolve(checkpoint)) is None
