"""The source's part in stopping a query: hold at a barrier, or drain to a frozen end.

One :class:`SourceStops` per driver-side reader (one per query run). At every
``latestOffset`` the reader asks it for a stop request to act on (:mod:`.stop_request`):

- **without drain** (Flink's stop-with-savepoint): the reader *holds*: from now on
  ``latestOffset`` returns its start, so no batch is planned after the last one (which has
  committed by the time Spark asks again). Channel state that barrier left pending stays in
  the checkpoint; no idle barrier writes it; the next run resumes exactly there.
- **with drain**: the end of every partition is frozen at the latest offsets of this moment
  (``min`` with an end the query already had) and recorded in the offsets with
  ``"drained": true``. From there the query is bounded input: it reads up to the frozen end,
  the last batch carries EndOfData and is the final checkpoint
  (:mod:`.final_checkpoint`). A drain of a query whose input already ended only records that
  it was honoured.

The reader also keeps the query's heartbeat (:mod:`.heartbeat`) from the first barrier token
it sees, so that ``unaligned stop`` can tell a running query from one that is not.

A request is acted on once per run. A stop without drain honoured by an earlier run is spent (that
run stopped). A drain honoured by an earlier run that never completed and whose frozen end never
reached Spark's offset log (a crash in between) is honoured again, at the latest offsets of then.

A drained end lasts as long as the drain: a run that starts from the committed EndOfData
offset of a drain it never saw (the drain completed in an earlier run) drops the frozen end and
reads on, unbounded, unless the run itself was given an end (``endingOffsets`` & co.). A run
that re-runs the drain's last batch (a crash before its commit) or continues a drain that had
not reached its end keeps the frozen end and finishes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from unaligned import crash_points
from unaligned.checkpoint import Checkpoint
from unaligned.crash_points import CrashPoint
from unaligned.finishing.final_checkpoint import remove_marker
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

    def _id(self) -> str:
        if self._reader_id is None:
            self._reader_id = uuid.uuid4().hex
        return self._reader_id
