"""``deliveryGuarantee=at-least-once`` on the real broker: the whole query SIGKILLed after batch
1's tasks wrote (its records are visible, the batch not decided), then restarted: every input
record is in the output, in order per partition, batch 1's written twice, none lost.

The query (integration/query_runner.py, 4 x 200 records, 3 batches) cuts every barrier
(``alignedCheckpointTimeout`` 1 ms, chunks of 20 rows): each task writes a chunk, spills the rest
as channel state, and the next batch replays it first, so the unaligned barriers and their
channel state run through the crash too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from crash_runs import PARTITIONS, crash, expected, finish, input_topic
from unaligned.checkpoint import Checkpoint
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

pytestmark = pytest.mark.slow

TopicFactory = Callable[..., str]


def _by_partition(kafka: EmbeddedKafka, output: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=False):
        got[record.partition].append(record.value)
    return got


def test_a_sigkill_before_the_decision_duplicates_and_loses_nothing(
    kafka: EmbeddedKafka, new_topic: TopicFactory, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    output = new_topic(partitions=PARTITIONS)
    config = {
        "bootstrap": kafka.bootstrap_servers,
        "input_topic": input_topic(kafka, new_topic),
        "output_topic": output,
        "checkpoint": str(checkpoint),
        "max_offsets": 300,
        "extra_sink_options": {
            "deliveryGuarantee": "at-least-once",
            "alignedCheckpointTimeout": "1ms",
            "chunkRows": "20",
        },
    }
    crash(config, tmp_path, "driver_before_commit_record@1")
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    assert log.read(1) is None, "batch 1 was decided before the crash"
    first = log.read(0)
    assert first is not None and first.participant == "kafka-at-least-once"
    assert any(first.channel_state.values()), "batch 0 spilled no channel state"
    before = sum(len(v) for v in _by_partition(kafka, output).values())
    finish(config, tmp_path)
    got = _by_partition(kafka, output)
    for p in range(PARTITIONS):
        once = list(dict.fromkeys(got.get(p, [])))  # first occurrences, in order
        assert once == expected(p), f"output partition {p} lost or reordered records"
    total = sum(len(v) for v in got.values())
    assert before > 0 and total > PARTITIONS * len(expected(0)), (
        "the crashed batch's records were not written again (no duplicate at all)"
    )
    assert log.unfinished_batch_ids() == []
