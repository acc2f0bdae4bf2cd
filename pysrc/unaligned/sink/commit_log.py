"""The sink's durable decisions: one commit record per micro-batch, under the checkpoint.

Layout (``<checkpoint>`` is the query's ``checkpointLocation``, any ``pyarrow.fs`` filesystem)::

    <checkpoint>/unaligned/commits/<batchId>.json   the decision: commit these prepared items
    <checkpoint>/unaligned/done/<batchId>.json      every item committed, batch finished
    <checkpoint>/unaligned/abandoned/<batchId>.json an operator ended the batch (unaligned abandon)

Everything the sink keeps lives under ``<checkpoint>/unaligned/`` (metrics and, by default,
channel state too); the paths are :class:`unaligned.checkpoint.Checkpoint`'s.

A commit record is written exactly once per batch, atomically (write a hidden temporary file in
the same directory, then rename it over the final name; on a local disk the file and the
directory are fsynced), *before* any prepared transaction or staged file of the batch is
committed. Its existence is the decision: a later run that finds it must roll the batch forward;
a batch without one was never decided and everything it prepared is aborted. Readers never see a
half-written record; temporary files (names starting with ``.``) are ignored. Each record
carries a checksum (:mod:`unaligned._util.checksum`) verified on every read: a record changed after
it was written stops the query with a :class:`CommitLogError` naming the file; a record without
one (its field removed after a deliberate edit) is read as it is.

The done marker is only an optimisation for recovery (rolling forward a finished batch again is
harmless because every commit is idempotent), and it is what pruning keys on: only finished
batches are ever pruned, the newest ``retain`` of them are kept (like Spark's
``minBatchesToRetain``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from unaligned._util.checksum import sealed_json, verified
from unaligned._util.fs import (
    Location,
    atomic_write,
    create_exclusive,
    describe,
    numbered_files,
    read_bytes,
)
from unaligned.channel_state.refs import ChannelStateRef
from unaligned.checkpoint import Checkpoint
from unaligned.errors import ChannelStateError, CommitLogError

logger = logging.getLogger(__name__)

RECORD_VERSION = 1
_NAME = re.compile(r"^(\d+)\.json$")


# --- commit records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitRecord:
    """The decision to commit batch ``batch_id``: every item the driver will commit.

    ``participant`` names who understands ``prepared`` ("kafka" or "files"); each item is that
    participant's JSON description of one task's prepared work (a transaction, a staged file).
    """

    batch_id: int
    participant: str
    prepared: tuple[Mapping[str, Any], ...]
    decided_at_ms: int
    channel_state: Mapping[int, tuple[ChannelStateRef, ...]] = field(default_factory=dict)
    """Channel state pending after this barrier, per sink task index, oldest first: part of the
    checkpoint; the next barrier's task with that index replays it before any new row. In the
    JSON, each ref is :meth:`~unaligned.channel_state.refs.ChannelStateRef.to_dict`."""
    task_count: int | None = None
    """How many sink tasks the batch had: the layout ``channel_state`` is laid out for
    (:mod:`unaligned.sink.pending_layout`). ``None`` in records written without it."""

    def to_json(self) -> bytes:
        """The record's JSON, sorted keys, with its checksum (:mod:`unaligned._util.checksum`)."""
        document: dict[str, Any] = {
            "version": RECORD_VERSION,
            "batchId": self.batch_id,
            "participant": self.participant,
            "decidedAtMs": self.decided_at_ms,
            "prepared": [dict(item) for item in self.prepared],
            "channelState": {
                str(index): [ref.to_dict() for ref in refs]
                for index, refs in sorted(self.channel_state.items())
            },
        }
        if self.task_count is not None:
            document["taskCount"] = self.task_count
        return sealed_json(document)

    @classmethod
    def from_json(cls, data: bytes, name: str) -> CommitRecord:
        """Parse and verify a record; a record without a checksum (a deliberate edit) is read
        as it is. Raises :class:`CommitLogError` naming ``name``."""
        try:
            doc, problem = verified(json.loads(data.decode("utf-8")))
            if problem is not None:
                raise CommitLogError(f"commit record {name}: {problem}")
            version = doc["version"]
            if version != RECORD_VERSION:
                raise CommitLogError(
                    f"commit record {name} has version {version}; this sink reads version "
                    f"{RECORD_VERSION}"
                )
            return cls(
                batch_id=int(doc["batchId"]),
                participant=str(doc["participant"]),
                prepared=tuple(dict(item) for item in doc["prepared"]),
                decided_at_ms=int(doc["decidedAtMs"]),
                channel_state={
                    int(index): tuple(ChannelStateRef.from_dict(ref) for ref in refs)
                    for index, refs in doc.get("channelState", {}).items()
                },
                task_count=None if doc.get("taskCount") is None else int(doc["taskCount"]),
            )
        except CommitLogError:
            raise
        except ChannelStateError as exc:  # a malformed channel-state ref
            raise CommitLogError(f"commit record {name} is unreadable: {exc}") from exc
        except (KeyError, TypeError, ValueError, UnicodeDecodeError, AttributeError) as exc:
            raise CommitLogError(f"commit record {name} is unreadable: {exc!r}") from exc


class CommitLog:
    """Commit records and done markers of one query's sink (see the module docstring)."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint

    def _record_location(self, batch_id: int) -> Location:
        return self._checkpoint.commit_record(batch_id)

    def _done_location(self, batch_id: int) -> Location:
        return self._checkpoint.done_marker(batch_id)

    def describe(self, batch_id: int) -> str:
        """Where batch ``batch_id``'s record is (for error messages)."""
        return describe(self._record_location(batch_id))

    def read(self, batch_id: int) -> CommitRecord | None:
        """Batch ``batch_id``'s commit record, ``None`` if the batch was never decided."""
        location = self._record_location(batch_id)
        try:
            data = read_bytes(location)
        except OSError as exc:
            raise CommitLogError(
                f"commit record {describe(location)} is unreadable: {exc}"
            ) from exc
        if data is None:
            return None
        record = CommitRecord.from_json(data, describe(location))
        if record.batch_id != batch_id:
            raise CommitLogError(
                f"commit record {describe(location)} names batch {record.batch_id}"
            )
        return record

    def write(self, record: CommitRecord) -> bool:
        """Make the decision for ``record.batch_id`` durable, if no decision exists yet.

        Returns ``False`` (and writes nothing) when the batch already has a record: a decided
        batch is never decided again, and of two deciders racing only one writes (see
        :func:`unaligned._util.fs.create_exclusive` for which filesystems make that exclusive).
        """
        location = self._record_location(record.batch_id)
        if not create_exclusive(location, record.to_json()):
            logger.warning(
                "batch %d already has commit record %s; this decision is dropped",
                record.batch_id,
                describe(location),
            )
            return False
        logger.info(
            "batch %d decided: commit record %s with %d prepared item(s)",
            record.batch_id,
            describe(location),
            len(record.prepared),
        )
        return True

    def mark_done(
        self, batch_id: int, *, commit_ms: float | None = None, abandoned: str | None = None
    ) -> None:
        """Record that batch ``batch_id`` is finished (idempotent): every item committed, or,
        with ``abandoned`` (the operator's choice), ended by ``unaligned abandon``.

        ``commit_ms``: how long the driver's ``commit()`` took up to here, kept for benchmarks.
        """
        doc: dict[str, Any] = {"batchId": batch_id, "doneAtMs": int(time.time() * 1000)}
        if commit_ms is not None:
            doc["commitMs"] = round(commit_ms, 3)
        if abandoned is not None:
            doc["abandoned"] = abandoned
        atomic_write(self._done_location(batch_id), json.dumps(doc).encode("utf-8"))

    def note_abandoned(self, batch_id: int, note: Mapping[str, Any]) -> None:
        """Keep what ``unaligned abandon`` did to batch ``batch_id`` (``inspect`` shows it)."""
        location = self._checkpoint.abandoned_note(batch_id)
        atomic_write(location, json.dumps(dict(note), sort_keys=True).encode("utf-8"))

    def abandoned_notes(self) -> dict[int, dict[str, Any]]:
        """Every batch an operator ended, with what was done (unreadable notes left out)."""
        notes: dict[int, dict[str, Any]] = {}
        for batch_id in numbered_files(self._checkpoint.abandoned_notes_dir):
            data = read_bytes(self._checkpoint.abandoned_note(batch_id))
            try:
                notes[batch_id] = dict(json.loads((data or b"{}").decode("utf-8")))
            except (ValueError, TypeError, UnicodeDecodeError):
                logger.warning("abandon note of batch %d is unreadable", batch_id)
        return notes

    def withdraw(self, batch_id: int) -> None:
        """Delete batch ``batch_id``'s commit record: the batch is undecided again and Spark
        runs it anew. Only for ``unaligned abandon --replay``, once nothing of it is open."""
        location = self._record_location(batch_id)
        try:
            self._checkpoint.filesystem.delete_file(location.path)
        except FileNotFoundError:
            return
        logger.info("batch %d: commit record %s withdrawn", batch_id, describe(location))

    def done_info(self, batch_id: int) -> dict[str, Any] | None:
        """The done marker's content (``batchId``, ``doneAtMs``, maybe ``commitMs``)."""
        location = self._done_location(batch_id)
        data = read_bytes(location)
        if data is None:
            return None
        try:
            return dict(json.loads(data.decode("utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise CommitLogError(
                f"done marker {describe(location)} is unreadable: {exc!r}"
            ) from exc

    def is_done(self, batch_id: int) -> bool:
        location = self._done_location(batch_id)
        return bool(location.filesystem.get_file_info(location.path).type == pafs.FileType.File)

    def latest_before(self, batch_id: int) -> CommitRecord | None:
        """The newest commit record of a batch before ``batch_id`` (exclusive), or ``None``.

        Its channel state is what barrier ``batch_id`` must replay: Spark runs a batch only
        after the previous batch's ``commit`` returned, so that record exists when it matters.
        """
        earlier = [b for b in self.decided_batch_ids() if b < batch_id]
        return self.read(earlier[-1]) if earlier else None

    def decided_batch_ids(self) -> list[int]:
        """Every batch with a commit record, ascending."""
        return numbered_files(self._checkpoint.commit_records_dir)

    def done_batch_ids(self) -> list[int]:
        return numbered_files(self._checkpoint.done_markers_dir)

    def unfinished_batch_ids(self) -> list[int]:
        """Batches decided but not marked done: recovery must roll these forward."""
        done = set(self.done_batch_ids())
        return [b for b in self.decided_batch_ids() if b not in done]

    def records(self, batch_ids: Sequence[int]) -> list[CommitRecord]:
        found = []
        for batch_id in batch_ids:
            record = self.read(batch_id)
            if record is not None:
                found.append(record)
        return found

    def prune(self, retain: int) -> list[int]:
        """Delete records and markers of finished batches older than the newest ``retain``.

        A batch is pruned only if it is marked done. Returns the pruned batch ids.
        """
        if retain < 1:
            raise CommitLogError(f"retain must be at least 1, got {retain}")
        done = self.done_batch_ids()
        pruned = done[:-retain] if len(done) > retain else []
        fs = self._checkpoint.filesystem
        for batch_id in pruned:
            # Record first: a record without a done marker would be rolled forward again.
            for location in (self._record_location(batch_id), self._done_location(batch_id)):
                try:
                    fs.delete_file(location.path)
                except FileNotFoundError:
                    pass
        if pruned:
            logger.debug("pruned commit records of batches %d..%d", pruned[0], pruned[-1])
        return pruned
