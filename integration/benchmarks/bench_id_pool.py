"""How many transactional ids a long-running Kafka sink leaves on the broker (issue 8, #10).

Run: ``python -m benchmarks id_pool [batches] [tasks]`` (default 500 batches of 8 tasks).
Drives the sink's Kafka participant through every step of the protocol per batch - open a
transaction per task (the pool picks the id), write, prepare, check the batch is decidable,
decide, commit, clean up - against one embedded broker, then counts the distinct
transactional ids the broker knows with the sink's prefix. Before the pool, every
(batch, task, attempt) had an id of its own: ``batches * tasks`` of them.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from typing import Any

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from benchmarks import write_results
from unaligned.checkpoint import Checkpoint

SCHEMA = StructType([StructField("value", BinaryType()), StructField("partition", IntegerType())])


def run(batches: int, tasks: int) -> dict[str, Any]:
    from unaligned.kafka.transactions import transaction_states
    from unaligned.sink.commit_log import CommitLog, CommitRecord
    from unaligned.sink.kafka_target import KafkaTarget
    from unaligned.sink.options import SinkOptions
    from unaligned.sink.topics.kafka_columns import kafka_columns
    from unaligned.sink.topics.kafka_participant import KafkaParticipant
    from unaligned.testing import EmbeddedKafka

    with EmbeddedKafka() as kafka, tempfile.TemporaryDirectory() as checkpoint:
        topic = f"pool-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=tasks)
        options = SinkOptions.parse(
            {
                "checkpointLocation": checkpoint,
                "kafka.bootstrap.servers": kafka.bootstrap_servers,
                "topic": topic,
            }
        )
        target = options.target
        assert isinstance(target, KafkaTarget)
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        participant = KafkaParticipant(target, kafka_columns(SCHEMA, target), prefix)
        log = CommitLog(Checkpoint.resolve(checkpoint))
        started = time.monotonic()
        for batch in range(batches):
            items = []
            for task in range(tasks):
                writer = participant.open_task(batch, task, 0)
                chunk = pa.RecordBatch.from_pydict({"value": [b"x"], "partition": [task]})
                writer.write_chunk(chunk)
                items.append(writer.prepare())
                writer.close()
            participant.check_decidable(items, batch)
            log.write(CommitRecord(batch, participant.kind, tuple(items), 0))
            participant.commit(items, batch, lambda n: None)
            log.mark_done(batch)
            participant.clean_up(log, batch)
            log.prune(options.min_batches_to_retain)
        seconds = time.monotonic() - started
        client = {"bootstrap_servers": kafka.bootstrap_servers}
        ids = transaction_states.list_transactional_ids(client, prefix, open_only=False)
    return {
        "batches": batches,
        "tasks": tasks,
        "distinct_transactional_ids": len(ids),
        "ids_before_the_pool": batches * tasks,
        "seconds": round(seconds, 1),
        "ms_per_batch": round(1000 * seconds / batches, 1),
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[2:] if argv is None else argv
    batches = int(args[0]) if args else 500
    tasks = int(args[1]) if len(args) > 1 else 8
    report = run(batches, tasks)
    for key, value in report.items():
        print(f"{key:>28}: {value}")
    write_results("id_pool", report)


if __name__ == "__main__":
    main(sys.argv[1:])
