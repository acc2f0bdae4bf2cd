"""``maxBytesPerTrigger`` end to end: a topic whose partitions mix records of 100 B and 100 KB,
read by Spark under ``Trigger.AvailableNow``. Every batch's key and value bytes, computed from
what was produced at the offsets Spark's progress reports, stay within the cap plus one record
per partition, and every record is read once."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from harness import kafka_stream
from unaligned.testing import EmbeddedKafka

SMALL, LARGE = 100, 100 * 1024
CAP = 512 * 1024
PARTITIONS = 3


def _offsets(progress_offset: Any) -> dict[int, int]:
    """Partition -> position of a progress report's offset (none before the first batch)."""
    doc = json.loads(progress_offset) if isinstance(progress_offset, str) else progress_offset
    if doc is None:
        return {}
    ((_, per_partition),) = doc["offsets"].items()
    return {int(p): int(o) for p, o in per_partition.items()}


@pytest.mark.slow
def test_no_batch_holds_more_than_the_cap_plus_one_record_per_partition(
    spark: Any, kafka: EmbeddedKafka, new_topic: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    rng = random.Random(43)
    sizes: dict[int, list[int]] = {}
    records = []
    for partition in range(PARTITIONS):
        # runs of small records, then runs of large ones: the case an estimate misses
        sizes[partition] = [
            size
            for _ in range(4)
            for size in [SMALL] * rng.randint(50, 400) + [LARGE] * rng.randint(2, 12)
        ]
        records += [
            (partition, None, f"{partition}:{i}:".encode().ljust(size, b"x"), None, None)
            for i, size in enumerate(sizes[partition])
        ]
    kafka.produce(topic, records)

    stream = kafka_stream(spark, kafka, topic, maxBytesPerTrigger=str(CAP))
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) > 3, "the cap should have split the input into several batches"
    read = 0
    for progress in batches:
        (source,) = progress["sources"]
        start, end = _offsets(source["startOffset"]), _offsets(source["endOffset"])
        total, allowance = 0, 0
        for partition, stop in end.items():
            taken = sizes[partition][start.get(partition, 0) : stop]
            total += sum(taken)
            allowance += taken[-1] if taken else 0
        assert total <= CAP + allowance, (progress["batchId"], total, allowance)
        read += progress["numInputRows"]
    final = _offsets(batches[-1]["sources"][0]["endOffset"])
    assert final == {p: len(s) for p, s in sizes.items()}
    assert read == sum(len(s) for s in sizes.values())
