"""What a read task concludes when Kafka says its position is out of range, or when a leader
change may have cut records from under it: data loss only when the leader confirms it.

Records that are gone before the query reads them are data loss, and ``failOnDataLoss``
decides (:func:`on_data_loss`: raise :class:`~unaligned.errors.DataLossError`, or warn and go
on; the driver's planning uses it too). A read task only calls it so on the leader's word,
asked with fresh metadata and the current leader epoch
(:class:`~unaligned.kafka.clients.offset_lookup.OffsetLookup`), as Kafka's Java consumer does:

1. ``OFFSET_OUT_OF_RANGE`` (:meth:`PositionCheck.out_of_range`): the leader's log start above the
   position means the records below it are gone (retention, deleted records): lost. A position
   inside the leader's log means the answer came from a broker that is not the leader or lags
   behind it: read again, nothing lost. A position at or past the leader's end (a new leader
   whose high watermark has not caught up, or a log truncated by an unclean election): read
   again until ``kafkaConsumer.pollTimeoutMs`` passes without progress, then lost.
2. A leader change under a task (KIP-320, :meth:`PositionCheck.truncated`): before the first
   records from a leader of a newer epoch are used, ``OffsetsForLeaderEpoch`` asks where that
   leader's log ends for the epoch of the last batch read. An end below the position means
   records already read are no longer in Kafka (only after an unclean leader election): lost.
"""

from __future__ import annotations

import logging

from unaligned.errors import DataLossError
from unaligned.kafka.clients.client_options import KafkaClientConfig
from unaligned.kafka.clients.offset_lookup import OffsetLookup
from unaligned.kafka.fetch.range_fetch import RangeFetcher
from unaligned.kafka.partitions import TopicPartitionId

logger = logging.getLogger(__name__)


def on_data_loss(fail_on_data_loss: bool, message: str) -> None:
    """``failOnDataLoss``: raise :class:`DataLossError` with ``message`` (naming the
    topic-partition and offsets), or log it as a warning and let the caller go on."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Set the option failOnDataLoss=false to continue with the records left."
        )
    logger.warning(
        "%s (failOnDataLoss=false: continuing with the records still available)", message
    )


class PositionCheck:
    """One read task's checks with the leaders (module docstring)."""

    def __init__(
        self, config: KafkaClientConfig, fetcher: RangeFetcher, fail_on_data_loss: bool
    ) -> None:
        self._config = config
        self._fetcher = fetcher
        self._fail = fail_on_data_loss

    def _offsets(self, tp: TopicPartitionId) -> tuple[int, int] | None:
        """The leader's log start and end (last stable offset with read_committed) of ``tp``;
        ``None`` when the partition no longer exists."""
        lookup = OffsetLookup(self._config)
        try:
            earliest, latest = lookup.earliest([tp]), lookup.latest([tp])
        finally:
            lookup.close()
        if tp not in earliest or tp not in latest:
            return None
        return earliest[tp], latest[tp]

    def _deleted(self, tp: TopicPartitionId, position: int, end: int) -> int:
        on_data_loss(
            self._fail,
            f"partition {tp} no longer exists (topic deleted?): records [{position}, {end}) "
            "are lost",
        )
        return end

    def gone_below(self, tp: TopicPartitionId, position: int, end: int) -> int | None:
        """When no records arrived for too long: the offset to go on from if the records at
        ``position`` are gone (after :func:`on_data_loss`), else ``None``."""
        offsets = self._offsets(tp)
        if offsets is None:
            return self._deleted(tp, position, end)
        earliest, _ = offsets
        if earliest <= position:
            return None
        skip_to = min(earliest, end)
        on_data_loss(
            self._fail,
            f"records of {tp} at offsets [{position}, {skip_to}) are gone before the query "
            "read them (retention or deleted records)",
        )
        return skip_to

    def out_of_range(
        self, tp: TopicPartitionId, position: int, end: int, stalled: bool
    ) -> int | None:
        """Step 1: after ``OFFSET_OUT_OF_RANGE`` at ``position`` of range ``[.., end)``, the
        offset to go on from (records lost, :func:`on_data_loss` called), or ``None`` to read
        again. ``stalled``: no progress for ``kafkaConsumer.pollTimeoutMs``."""
        offsets = self._offsets(tp)
        if offsets is None:
            return self._deleted(tp, position, end)
        earliest, latest = offsets
        if earliest > position:
            return self.gone_below(tp, position, end)
        if position < latest:
            logger.info(
                "%s: offset %d answered out of range, but the leader has offsets [%d, %d): a "
                "broker that is not the leader (or lags behind it) answered; reading again",
                tp,
                position,
                earliest,
                latest,
            )
            return None
        if not stalled:
            return None  # a new leader's high watermark may not have caught up yet
        on_data_loss(
            self._fail,
            f"offset {position} of {tp} is at or past the end of the leader's log [{earliest}, "
            f"{latest}) (the log was truncated by an unclean leader election, or the topic was "
            f"recreated): records [{position}, {end}) are lost",
        )
        return end

    def truncated(self, tp: TopicPartitionId, read_epoch: int, position: int) -> bool | None:
        """Step 2: whether the current leader's log for ``read_epoch`` (the leader epoch of the
        last batch read) ends below ``position`` (after :func:`on_data_loss`): ``True``
        (truncated), ``False`` (nothing read was cut), ``None`` (no answer yet: check again)."""
        answer = self._fetcher.epoch_end_offsets({tp: read_epoch}).get(tp)
        if answer is None:
            return None
        if answer.end_offset < 0 or answer.end_offset >= position:
            return False
        on_data_loss(
            self._fail,
            f"the log of {tp} now ends at offset {answer.end_offset} for leader epoch "
            f"{read_epoch} (after a leader change; unclean leader election?): records "
            f"[{answer.end_offset}, {position}) this query already read are no longer in Kafka",
        )
        return True
