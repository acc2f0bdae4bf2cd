"""The input and the sink targets of ``test_cluster_faults.py``, and how each is proven exact.

:func:`make_input` produces the input topic; a :class:`FaultTarget` is one sink target (a Kafka
topic, a folder of Parquet files, an Iceberg or a Delta table): what ``query_runner.py`` needs
to write to it (:meth:`FaultTarget.config`) and its exactly-once check
(:meth:`FaultTarget.assert_exactly_once`), each read back by a reader that is not the sink's:

- Kafka: ``read_committed``, input order per partition (or per key behind a shuffle); last
  stable offset == end offset and no open transaction of the sink's prefix.
- Files: the manifest and ``_spark_metadata``; no staging file, no data file they do not name.
- Tables: deltalake's ``to_pyarrow_table`` / pyiceberg's scan (``table_readers.py``); no data
  file in the table's data folder that its log or snapshots do not name.

For every target: every batch decided and finished, no channel state pending or left on disk.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import assert_no_stray_files, committed_values, wait_until
from table_readers import TableUnderTest
from unaligned.checkpoint import Checkpoint
from unaligned.kafka.transactions.transaction_states import list_transactional_ids
from unaligned.sink.commit_log import CommitLog
from unaligned.testing import EmbeddedKafka

PARTITIONS = 4

TopicFactory = Callable[..., str]


# --- the input -----------------------------------------------------------------------------------


def _values(partition: int, count: int, size: int) -> list[bytes]:
    """``p<partition>-<index>-`` padded with incompressible bytes (spilled channel state then
    really has the size of the rows, and goes to files rather than inline)."""
    rng = random.Random(partition)
    out = []
    for i in range(count):
        head = f"p{partition}-{i:05d}-".encode()
        out.append(head + rng.randbytes(max(0, size - len(head))))
    return out


def make_input(
    kafka: EmbeddedKafka, new_topic: TopicFactory, counts: dict[int, int], size: int = 64
) -> tuple[str, dict[int, list[bytes]]]:
    topic = new_topic(partitions=PARTITIONS)
    expected = {p: _values(p, counts.get(p, 0), size) for p in range(PARTITIONS)}
    kafka.produce(
        topic,
        [
            (p, f"k{i % 7}".encode(), v, None, None)
            for p in range(PARTITIONS)
            for i, v in enumerate(expected[p])
        ],
    )
    return topic, expected


# --- checks --------------------------------------------------------------------------------------


def _channel_state_files(checkpoint: Path) -> list[Path]:
    state_dir = checkpoint / "unaligned" / "channel-state"
    return [p for p in state_dir.rglob("*") if p.is_file()] if state_dir.exists() else []


def _assert_sink_state_clean(checkpoint: Path) -> None:
    log = CommitLog(Checkpoint.resolve(str(checkpoint)))
    assert log.unfinished_batch_ids() == [], "batches decided but not finished"
    decided = log.decided_batch_ids()
    assert decided, "no batch was decided"
    latest = log.read(decided[-1])
    assert latest is not None and dict(latest.channel_state) == {}, "channel state left pending"
    leftovers = _channel_state_files(checkpoint)
    assert leftovers == [], f"channel-state files left: {leftovers}"


def _diff(got: list[bytes], want: list[bytes]) -> str:
    dupes = len(got) - len(set(got))
    missing = len(set(want) - set(got))
    extra = len(set(got) - set(want))
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    return (
        f"{len(got)} records (want {len(want)}): {dupes} duplicates, {missing} missing, {extra} "
        f"unexpected, first difference at index {first}"
    )


def _keyed(values: list[bytes]) -> dict[bytes, list[bytes]]:
    """Values grouped by their key (``k<i % 7>``, i = the value's index in its partition)."""
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for value in values:
        index = int(value.split(b"-")[1])
        out[f"k{index % 7}".encode()].append(value)
    return out


def assert_kafka_exactly_once(
    kafka: EmbeddedKafka,
    output: str,
    expected: dict[int, list[bytes]],
    checkpoint: Path,
    prefix: str,
    order: str = "partition",
) -> None:
    """``order``: ``partition`` (each output partition in input order) or ``key`` (a shuffle by
    key interleaves a partition's keys; each key's records stay in input order)."""
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "last stable offset == end offset on every output partition (no transaction left open)",
        timeout_s=15,
    )
    open_ids = list_transactional_ids({"bootstrap_servers": kafka.bootstrap_servers}, prefix)
    assert open_ids == [], f"open transactions of the sink: {open_ids}"
    got: dict[int, list[bytes]] = defaultdict(list)
    for record in kafka.consume_all(output, read_committed=True):
        got[record.partition].append(record.value)
    for partition, values in expected.items():
        if order == "key":
            assert sorted(got[partition]) == sorted(values), (
                f"output partition {partition}: {_diff(sorted(got[partition]), sorted(values))}"
            )
            assert _keyed(got[partition]) == _keyed(values), (
                f"output partition {partition}: key order"
            )
        else:
            assert got[partition] == values, (
                f"output partition {partition}: {_diff(got[partition], values)}"
            )
    _assert_sink_state_clean(checkpoint)


def assert_files_exactly_once(
    output: Path, expected: dict[int, list[bytes]], checkpoint: Path
) -> None:
    got = committed_values(output)
    for partition, values in expected.items():
        assert got.get(partition, []) == values, (
            f"input partition {partition}: {_diff(got.get(partition, []), values)}"
        )
    assert_no_stray_files(output)
    _assert_sink_state_clean(checkpoint)


def assert_table_exactly_once(
    table: TableUnderTest, expected: dict[int, list[bytes]], checkpoint: Path
) -> None:
    """Every input record once in the table as its format's library reads it (rows ordered by
    their input offset per input partition), and no data file the table does not name."""
    got = table.values_by_partition()
    for partition, values in expected.items():
        assert got.get(partition, []) == values, (
            f"input partition {partition}: {_diff(got.get(partition, []), values)}"
        )
    leftovers = table.files_on_disk() - table.files_in_table()
    assert leftovers == set(), (
        f"{table.format} data files no snapshot or log names: {sorted(leftovers)}"
    )
    _assert_sink_state_clean(checkpoint)


# --- targets -------------------------------------------------------------------------------------


@dataclass
class FaultTarget:
    """One sink target of a fault test: ``kafka``, ``files``, ``iceberg`` or ``delta``."""

    kind: str
    tmp_path: Path
    output_topic: str | None = None
    prefix: str | None = None

    @classmethod
    def make(cls, kind: str, tmp_path: Path, new_topic: TopicFactory) -> FaultTarget:
        if kind == "kafka":
            topic = new_topic(partitions=PARTITIONS)
            return cls(kind, tmp_path, topic, f"ua-{tmp_path.name}")
        return cls(kind, tmp_path)

    @property
    def table(self) -> TableUnderTest:
        return TableUnderTest.make(self.kind, self.tmp_path)

    def config(self, **sink_options: str) -> dict[str, Any]:
        """``query_runner.py``'s keys for this target, with ``sink_options`` added."""
        if self.kind == "kafka":
            assert self.prefix is not None
            options = {"transactionalIdPrefix": self.prefix, **sink_options}
            return {"output_topic": self.output_topic, "extra_sink_options": options}
        if self.kind == "files":
            return {"output_path": str(self.tmp_path / "out"), "extra_sink_options": sink_options}
        return {"extra_sink_options": self.table.sink_options(**sink_options)}

    def assert_exactly_once(
        self,
        kafka: EmbeddedKafka,
        expected: dict[int, list[bytes]],
        checkpoint: Path,
        order: str = "partition",
    ) -> None:
        """``order`` (Kafka only): see :func:`assert_kafka_exactly_once`; a table's rows are
        ordered by their input offset, a file sink's by the manifest."""
        if self.kind == "kafka":
            assert self.output_topic is not None and self.prefix is not None
            assert_kafka_exactly_once(
                kafka, self.output_topic, expected, checkpoint, self.prefix, order
            )
        elif self.kind == "files":
            assert_files_exactly_once(self.tmp_path / "out", expected, checkpoint)
        else:
            assert_table_exactly_once(self.table, expected, checkpoint)
