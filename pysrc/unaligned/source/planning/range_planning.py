"""A batch's offset ranges, after the data-loss checks (the driver's planning).

:func:`plan_ranges` turns the start and end offsets of a batch into one range ``[start, end)``
per topic-partition of the end (next-offset-to-read positions, exclusive ends), after checking
with the broker what may have been lost in between: deleted topics and partitions, a topic
re-created under the same name (its Kafka topic id changed), records gone to retention. Each
finding goes through ``failOnDataLoss``
(:func:`unaligned.source.lost_records.on_data_loss`). The read tasks are then formed by
:func:`unaligned.source.planning.offset_ranges.group_ranges`; see ARCHITECTURE.md, "The source's
read tasks".
"""

from __future__ import annotations

from unaligned.kafka.clients.offset_lookup import OffsetLookup
from unaligned.kafka.partitions import TopicPartitionId, format_partitions
from unaligned.source.lost_records import on_data_loss
from unaligned.source.offsets import KafkaSourceOffset
from unaligned.source.options import SourceOptions
from unaligned.source.planning.offset_ranges import OffsetRange
from unaligned.source.planning.partition_discovery import confirmed_gone


def plan_ranges(
    options: SourceOptions,
    lookup: OffsetLookup,
    begin: KafkaSourceOffset,
    finish: KafkaSourceOffset,
    *,
    listed_now: bool = False,
) -> list[OffsetRange]:
    """The range of every partition of ``finish``, after the data-loss checks (``listed_now``:
    ``finish`` was just made from a listing of the topics, so check 2 asks for no listing again
    and goes by the earliest offsets, which the broker gives for existing partitions only):

    1. partitions of ``begin`` missing from ``finish`` (topic deleted): lost;
    2. partitions of ``finish`` that no longer exist (the broker confirms it): lost,
       planned as empty ranges;
    3. a new partition starts at its earliest offset, which should be 0;
    4. a topic whose id changed (deleted and re-created under the same name): lost; with
       failOnDataLoss=false its partitions are read from their earliest offset;
    5. an end below the start (topic recreated): lost, planned empty;
    6. a start below the log start offset (retention, delete-records): the gap is lost.
    """
    fail = options.fail_on_data_loss
    recreated = _recreated_topics(begin, finish)
    gone = sorted(set(begin.positions) - set(finish.positions))
    if gone:
        unread = ", ".join(f"{tp} from offset {begin.positions[tp]}" for tp in gone)
        on_data_loss(
            fail, f"partitions {format_partitions(gone)} are gone (topic deleted?): {unread}"
        )
    if listed_now or not finish.positions:
        vanished: set[TopicPartitionId] = set()
    else:
        topics = lookup.topics({tp.topic for tp in finish.positions})
        unlisted = [tp for tp in finish.positions if tp.partition not in topics.get(tp.topic, ())]
        vanished = confirmed_gone(lookup, unlisted)
    earliest = lookup.earliest([tp for tp in finish.positions if tp not in vanished])
    vanished |= {tp for tp in finish.positions if tp not in earliest}
    if vanished:
        on_data_loss(fail, f"partitions {format_partitions(vanished)} disappeared (topic deleted?)")
    for topic, (old, new) in sorted(recreated.items()):
        at = {tp.partition: p for tp, p in begin.positions.items() if tp.topic == topic}
        on_data_loss(
            fail,
            f"topic '{topic}' was deleted and re-created: its topic id was {old} when the "
            f"query last read it (up to offsets {at}) and is {new} now, so the records of "
            "the old topic not yet read are lost and the new topic's offsets start again. "
            "Set failOnDataLoss=false to read the new topic from its earliest offset, or "
            "start the query with a new checkpoint",
        )
    ranges: list[OffsetRange] = []
    for tp in sorted(finish.positions):
        until = finish.positions[tp]
        if tp in vanished:
            ranges.append(OffsetRange(tp, until, until))
            continue
        frm = begin.positions.get(tp, earliest[tp])
        if tp.topic in recreated:
            frm = earliest[tp]  # failOnDataLoss=false: the new topic from its start
        elif tp not in begin.positions and frm != 0:
            on_data_loss(fail, f"partition {tp} was added and starts at offset {frm}, not 0")
        if until < frm:
            on_data_loss(
                fail, f"the offset of {tp} went back from {frm} to {until} (topic recreated?)"
            )
            frm = until
        elif frm < earliest[tp]:
            lost_to = min(earliest[tp], until)
            on_data_loss(
                fail,
                f"records of {tp} at offsets [{frm}, {lost_to}) are gone before the "
                "query read them (retention or deleted records)",
            )
            frm = lost_to
        ranges.append(OffsetRange(tp, frm, until))
    return ranges


def _recreated_topics(
    begin: KafkaSourceOffset, finish: KafkaSourceOffset
) -> dict[str, tuple[str, str]]:
    """topic -> (id at ``begin``, id at ``finish``) for each topic whose id changed."""
    return {
        topic: (old, finish.topic_ids[topic])
        for topic, old in begin.topic_ids.items()
        if topic in finish.topic_ids and finish.topic_ids[topic] != old
    }
