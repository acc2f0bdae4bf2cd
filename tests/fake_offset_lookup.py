"""A fake broker for the driver-side source code: :class:`FakeLookup` answers as
:class:`~unaligned.kafka.clients.offset_lookup.OffsetLookup` does (listings, metadata confirmations,
earliest / latest offsets), :class:`TimedLookup` also answers timestamp lookups;
:func:`reader_for` is a driver-side stream reader that asks one of them. Shared by the tests of
the stream reader, of position resolution and of the source's side of stopping."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.options import SourceOptions
from unaligned.source.planning.batch_planning import BatchPlanning
from unaligned.source.stream_reader import KafkaStreamReader

TP = TopicPartitionId


class FakeLookup:
    """The broker as :class:`~unaligned.kafka.clients.offset_lookup.OffsetLookup` answers for it.

    ``partitions[topic]`` lists what exists; ``ends`` / ``starts`` are latest / earliest offsets
    (default 0). :meth:`flake_next_listing` makes the next :meth:`topics` calls leave things out
    while the topic still exists (a broker with stale metadata); :meth:`confirm_topics` answers
    from the truth, like a direct metadata request. Offsets of a topic that does not exist
    are left out of the answer, as the real look-up leaves them out."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self.partitions = {topic: list(range(n)) for topic, n in partitions.items()}
        self.ends: dict[TopicPartitionId, int] = {}
        self.starts: dict[TopicPartitionId, int] = {}
        self.flakes: list[tuple[set[str], set[TopicPartitionId]]] = []
        self.unclear: set[str] = set()
        self.confirmed: list[list[str]] = []
        self.listings = 0
        self.ids: dict[str, str] = {}
        """Topic ids (KIP-516) the broker gives; a topic without one here has none."""

    def flake_next_listing(
        self, topics: Iterable[str] = (), partitions: Iterable[TopicPartitionId] = ()
    ) -> None:
        self.flakes.append((set(topics), set(partitions)))

    def delete(self, topic: str) -> None:
        del self.partitions[topic]

    def topics(self, names: Collection[str] | None = None) -> dict[str, list[int]]:
        self.listings += 1
        topics, tps = self.flakes.pop(0) if self.flakes else (set(), set())
        return {
            t: [p for p in ps if TP(t, p) not in tps]
            for t, ps in self.partitions.items()
            if t not in topics and (names is None or t in names)
        }

    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        return {t: self.ids[t] for t in names if t in self.partitions and t in self.ids}

    def confirm_topics(self, names: Iterable[str]) -> dict[str, tuple[int, ...] | None]:
        wanted = sorted(set(names))
        self.confirmed.append(wanted)
        return {
            t: tuple(self.partitions[t]) if t in self.partitions else None
            for t in wanted
            if t not in self.unclear
        }

    def _existing(self, tps: Iterable[TopicPartitionId]) -> list[TopicPartitionId]:
        """As the real look-up: a partition that does not exist is left out of the answer."""
        return [tp for tp in tps if tp.partition in self.partitions.get(tp.topic, ())]

    def earliest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        return {tp: self.starts.get(tp, 0) for tp in self._existing(tps)}

    def latest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        return {tp: self.ends.get(tp, 0) for tp in self._existing(tps)}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, int | None]:
        raise AssertionError("not used here")

    def close(self) -> None:
        pass


class TimedLookup(FakeLookup):
    """FakeLookup that answers offsets_for_times from ``times`` (None: no record that late)."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        super().__init__(partitions)
        self.times: dict[tuple[TopicPartitionId, int], int | None] = {}
        self.latest_calls: list[list[TopicPartitionId]] = []

    def latest(self, tps: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        tps = list(tps)
        self.latest_calls.append(tps)
        return super().latest(tps)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartitionId, int]
    ) -> dict[TopicPartitionId, int | None]:
        return {tp: self.times.get((tp, ts)) for tp, ts in timestamps.items()}


def reader_for(lookup: FakeLookup, **options: str) -> KafkaStreamReader:
    """A stream reader with these source options (earliest start by default) on ``lookup``."""
    given = {
        "kafka.bootstrap.servers": "broker:9092",
        "startingOffsets": "earliest",
        "fetchOffset.retryIntervalMs": "0",
        **options,
    }
    parsed = SourceOptions.parse(given)
    return KafkaStreamReader(parsed, BatchPlanning(parsed, lookup))  # type: ignore[arg-type]
