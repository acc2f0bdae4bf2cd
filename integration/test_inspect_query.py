"""``unaligned inspect --json`` on the checkpoint of a real query: a short bounded query through
the Kafka sink, then the document's barriers are the query's batches, all committed on both
sides, the source ended, the query finished, and the broker has no open transaction left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import kafka_stream, kcat_read_committed, produce_skewed
from unaligned import cli
from unaligned.sink.topics.kafka_id_pool import id_stem
from unaligned.testing import EmbeddedKafka


def test_inspect_shows_the_batches_of_a_finished_query(
    spark: Any,
    kafka: EmbeddedKafka,
    new_topic: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, output = new_topic(partitions=2), new_topic(partitions=2)
    produce_skewed(kafka, topic, [150, 90], value_bytes=50)
    checkpoint = str(tmp_path / "checkpoint")
    prefix = f"insp-{tmp_path.name}"
    query = (
        kafka_stream(spark, kafka, topic, endingOffsets="latest", maxOffsetsPerTrigger="100")
        .select("key", "value", "partition")
        .writeStream.format("unaligned")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", output)
        .option("checkpointLocation", checkpoint)
        .option("transactionalIdPrefix", prefix)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
    finally:
        if query.isActive:
            query.stop()
    rows_by_batch = {p["batchId"]: p["numInputRows"] for p in query.recentProgress}
    assert len(rows_by_batch) >= 3 and sum(rows_by_batch.values()) == 240

    capsys.readouterr()
    code = cli.main(
        ["inspect", checkpoint, "--json", "--bootstrap-servers", kafka.bootstrap_servers]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)

    barriers = doc["barriers"]
    assert [b["batchId"] for b in barriers] == sorted(rows_by_batch)
    for barrier in barriers:
        assert (barrier["sink"], barrier["spark"], barrier["committed"]) == (
            "done",
            "committed",
            True,
        )
        assert barrier["rowsWritten"] == rows_by_batch[barrier["batchId"]]
        assert barrier["mode"] == "aligned" and barrier["rowsSpilled"] == 0
        assert barrier["startMs"] is not None and barrier["durationMs"] >= 0
    assert doc["inDoubt"] == [] and doc["pendingChannelState"]["tasks"] == []

    (source,) = doc["sources"]
    assert source["endOfData"] is True
    assert source["ending"] == {topic: {"0": 150, "1": 90}}
    assert source["finished"] == {topic: [0, 1]}
    assert doc["finished"]["finalBatchId"] == max(rows_by_batch)
    assert doc["finished"]["hasFinished"] is True
    assert doc["stopRequest"] is None

    transactions = doc["openTransactions"]
    stem = id_stem(prefix, doc["queryId"])  # the query's own ids: the prefix and its owner tag
    assert (transactions["prefix"], transactions["prefixFrom"]) == (stem, "commit record")
    assert transactions["stem"] == stem and transactions["transactions"] == []


def test_inspect_says_finished_for_an_available_now_query_without_an_end(
    spark: Any,
    kafka: EmbeddedKafka,
    new_topic: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``trigger(availableNow=True)`` with no ``endingOffsets`` (the Quick start's query) ends by
    itself once it read what was there at its start: inspect says finished, not running; a
    second run that reads more removes the mark at its first barrier, and marks its own end."""
    topic, output = new_topic(partitions=2), new_topic(partitions=2)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> dict[str, Any]:
        query = (
            kafka_stream(spark, kafka, topic, maxOffsetsPerTrigger="100")
            .select("key", "value")
            .writeStream.format("unaligned")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", output)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180), "the availableNow query did not end"
        finally:
            if query.isActive:
                query.stop()
        capsys.readouterr()
        assert cli.main(["inspect", checkpoint, "--json"]) == 0
        doc: dict[str, Any] = json.loads(capsys.readouterr().out)
        return doc

    produce_skewed(kafka, topic, [120, 60], value_bytes=20)
    first = run()
    (source,) = first["sources"]
    assert source["ending"] is None and source["endOfData"] is False  # no end was given
    last = max(b["batchId"] for b in first["barriers"])
    assert first["finished"] == {**first["finished"], "finalBatchId": last, "hasFinished": True}
    assert cli.main(["inspect", checkpoint]) == 0
    text = capsys.readouterr().out
    (state,) = [line for line in text.splitlines() if line.startswith("state")]
    assert "Finished: final checkpoint" in state, text

    produce_skewed(kafka, topic, [30, 30], value_bytes=20)
    second = run()
    assert max(b["batchId"] for b in second["barriers"]) > last
    assert second["finished"]["finalBatchId"] == max(b["batchId"] for b in second["barriers"])
    assert second["finished"]["hasFinished"] is True
    values = kcat_read_committed(kafka.bootstrap_servers, output)
    assert len(values) == 240
