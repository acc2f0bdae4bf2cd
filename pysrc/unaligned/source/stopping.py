"""The source's part in stopping a query: hold at a barrier, or drain to a frozen end.

One :class:`SourceStops` per driver-side reader (one per query run). At every ``latestOffset``
the reader asks it for a stop request to act on (:mod:`unaligned.finishing.stop_request`):
without drain the reader *holds* (``latestOffset`` returns its start: no batch after the last
one); with drain every partition's end is frozen at the latest offsets of now (``"drained":
true``) and the query ends with its final checkpoint
(:mod:`unaligned.finishing.final_checkpoint`). It also keeps the query's heartbeat
(:mod:`unaligned.finishing.heartbeat`). Which requests a later run acts on again, and how long a
drained end lasts: ARCHITECTURE.md, "Finishing".
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from unaligned._util import crash_points
from unaligned._util.crash_points import CrashPoint
from unaligned.checkpoint import Checkpoint
from unaligned.finishing.final_checkpoint import finished_batch, mark_finished, remove_marker
from unaligned.finishing.heartbeat import SourceHeartbeat
from unaligned.finishing.stop_request import (
    POLL_INTERVAL_S,
    LinkedCheckpoints,
    StopRequest,
    mark_honoured,
    read_request,
)
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.offsets import KafkaSourceOffset

logger = logging.getLogger(__name__)


class SourceStops:
    """Stop requests as the driver-side reader of one query run sees them."""

    def __init__(
        self,
        bounded_by_options: bool,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: SourceHeartbeat | None = None,
    ) -> None:
        self._bounded_by_options = bounded_by_options
        self._heartbeat = SourceHeartbeat() if heartbeat is None else heartbeat
        self._clock = clock
        self._links = LinkedCheckpoints()
        self._reader_id: str | None = None
        self._next_poll = 0.0
        self._saw_drain = False
        self.held = False
        """Whether a stop without drain was honoured: no batch is planned any more."""

    def planned(self, end: KafkaSourceOffset) -> None:
        """A batch ending at ``end`` was planned by this reader."""
        self._heartbeat.watch(end.barrier_token)
        if end.drained:
            self._saw_drain = True

    def resumed(self, begin: KafkaSourceOffset) -> KafkaSourceOffset:
        """``begin`` without the frozen end of a drain that completed in an earlier run."""
        if (
            begin.drained
            and begin.end_of_data()
            and not self._saw_drain
            and not self._bounded_by_options
        ):
            logger.info("the drain of an earlier run completed: reading on without an end")
            return replace(begin, ending=None, drained=False)
        return begin

    def poll(self, begin: KafkaSourceOffset) -> tuple[Checkpoint, StopRequest] | None:
        """(checkpoint, request) when a stop request waits to be acted on by this reader; read
        at most once per :data:`POLL_INTERVAL_S`."""
        self._heartbeat.watch(begin.barrier_token)
        now = self._clock()
        if begin.barrier_token is None or now < self._next_poll:
            return None
        self._next_poll = now + POLL_INTERVAL_S
        checkpoint = self._links.get(begin.barrier_token)
        if checkpoint is None:
            return None
        request = read_request(checkpoint)
        if request is None or not self._to_act_on(request, begin):
            return None
        return checkpoint, request

    def _to_act_on(self, request: StopRequest, begin: KafkaSourceOffset) -> bool:
        """Not yet honoured; or a drain an earlier run honoured that never reached Spark's
        offset log (``begin`` is not drained) and never completed: it is honoured again."""
        if request.honoured_by is None:
            return True
        return (
            request.drain
            and request.honoured_by != self._reader_id
            and request.completed_batch is None
            and not begin.drained
        )

    def hold(self, checkpoint: Checkpoint, request: StopRequest) -> None:
        """Honour a stop without drain: plan no batch from now on."""
        mark_honoured(checkpoint, request, self._id())
        self.held = True
        logger.info("stop without drain: no batch after the last committed barrier")

    def drain(
        self,
        checkpoint: Checkpoint,
        request: StopRequest,
        begin: KafkaSourceOffset,
        latest: Mapping[TopicPartitionId, int],
    ) -> KafkaSourceOffset:
        """Honour a drain: ``begin`` with every end frozen at ``latest``. A query whose input
        already ended is returned as it is."""
        if begin.end_of_data():
            mark_honoured(checkpoint, request, self._id())
            return begin
        remove_marker(checkpoint)  # a marker of an earlier final checkpoint is stale now
        mark_honoured(checkpoint, request, self._id())
        crash_points.reach(CrashPoint.DRAIN_HONOURED)
        self._saw_drain = True
        if begin.ending is None:
            ending = dict(latest)
        else:
            ending = {tp: min(end, latest.get(tp, end)) for tp, end in begin.ending.items()}
        logger.info("drain: input ends at %s", ending)
        return replace(begin, ending=ending, drained=True)

    def read_everything(self, begin: KafkaSourceOffset) -> None:
        """``Trigger.AvailableNow`` read everything up to its target and the sink left nothing
        pending: ``latestOffset`` returns its start and Spark ends the query. Its last batch is
        then a final checkpoint as much as a bounded query's is (nothing open, nothing pending),
        so it gets the ``finished`` marker (``unaligned inspect``, ``await_finished``); a later
        run that reads on removes it at its first barrier. Needs the link a format("unaligned")
        sink on this host keeps; without one nothing is marked."""
        if begin.barrier_token is None:
            return
        checkpoint = self._links.get(begin.barrier_token)
        if checkpoint is None:
            return
        last = checkpoint.last_logged_batch()
        if last is None or not checkpoint.spark_committed(last):
            return
        if finished_batch(checkpoint) != last:
            mark_finished(checkpoint, last)

    def _id(self) -> str:
        if self._reader_id is None:
            self._reader_id = uuid.uuid4().hex
        return self._reader_id
