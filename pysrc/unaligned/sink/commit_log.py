"""The sink's durable decisions: one commit record per micro-batch, under the checkpoint.

Layout (``<checkpoint>`` is the query's ``checkpointLocation``, any ``pyarrow.fs`` filesystem)::

    <checkpoint>/unaligned-sink/commits/<batchId>.json   the decision: commit these prepared items
    <checkpoint>/unaligned-sink/done/<batchId>.json      every item committed, batch finished

A commit record is written exactly once per batch, atomically (write a hidden temporary file in
the same directory, then rename it over the final name; on a local disk the file and the
directory are fsynced), *before* any prepared transaction or staged file of the batch is
committed. Its existence is the decision: a later run that finds it must roll the batch forward;
a batch without one was never decided and everything it prepared is aborted. Readers never see a
half-written record; temporary files (names starting with ``.``) are ignored.

The done marker is only an optimisation for recovery (rolling forward a finished batch again is
harmless because every commit is idempotent), and it is what pruning keys on: only finished
batches are ever pruned, the newest ``retain`` of them are kept (like Spark's
``minBatchesToRetain``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional, Any, Mapping, Sequence

import pyarrow.fs as pafs

from unaligned.barriers.barrier import Location, resolve_location
from unaligned.errors import CommitLogError

logger = logging.getLogger(__name__)

SINK_STATE_DIR = "unaligned-sink"
COMMITS_DIR = "commits"
DONE_DIR = "done"
RECORD_VERSION = 1
_NAME = re.compile(r"^(\d+)\.json$")


# --- atomic small files ----------------------------------------------------------------------


def atomic_write(location: Location, data: bytes) -> None:
    """Write ``data`` to ``location`` so that readers see all of it or nothing.

    Write-then-rename inside the same directory. On a local filesystem the temporary file is
    fsynced before the rename and the directory after it, so the file survives a power cut once
    this returns. On object stores a single PUT is already atomic; pyarrow's ``move`` there is a
    copy + delete of an object that is complete either way.
    """
    fs = location.filesystem
    parent, _, name = location.path.rpartition("/")
    fs.create_dir(parent, recursive=True)
    temporary = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(temporary) as stream:
        stream.write(data)
    local = isinstance(fs, pafs.LocalFileSystem)
    if local:
        _fsync_path(temporary)
    fs.move(temporary, location.path)
    if local:
        _fsync_path(parent)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bytes(location: Location) -> bytes | None:
    """The whole file, or ``None`` if it does not exist."""
    try:
        with location.filesystem.open_input_stream(location.path) as stream:
            return stream.read()
    except FileNotFoundError:
        return None


def numbered_files(directory: Location) -> list[int]:
    """Sorted ``N`` of every ``N.json`` directly in ``directory`` (missing directory: none)."""
    selector = pafs.FileSelector(directory.path, allow_not_found=True, recursive=False)
    numbers = []
    for info in directory.filesystem.get_file_info(selector):
        match = _NAME.match(info.base_name)
        if match and info.type == pafs.FileType.File:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def _describe(location: Location) -> str:
    return location.uri or location.path


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
    channel_state: Mapping[int, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    """Channel state pending after this barrier, per sink task index, oldest first (JSON of
    :class:`unaligned.channel_state.refs.ChannelStateRef`): part of the checkpoint; the next barrier's
    task with that index replays it before any new row."""

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": RECORD_VERSION,
                "batchId": self.batch_id,
                "participant": self.participant,
                "decidedAtMs": self.decided_at_ms,
                "prepared": [dict(item) for item in self.prepared],
                "channelState": {
                    str(index): [dict(ref) for ref in refs]
                    for index, refs in sorted(self.channel_state.items())
                },
            },
            sort_keys=True,
        ).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, name: str) -> "CommitRecord":
        try:
            doc = json.loads(data.decode("utf-8"))
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
                    int(index): tuple(dict(ref) for ref in refs)
                    for index, refs in doc.get("channelState", {}).items()
                },
            )
        except CommitLogError:
            raise
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
            raise CommitLogError(f"commit record {name} is unreadable: {exc!r}") from exc


class CommitLog:
    """Commit records and done markers of one query's sink (see the module docstring)."""

    def __init__(self, root: Location) -> None:
        self._root = root

    @classmethod
    def under_checkpoint(cls, checkpoint_location: str) -> "CommitLog":
        """The log under ``<checkpoint>/unaligned-sink`` (resolves the filesystem; no I/O)."""
        return cls(resolve_location(checkpoint_location).child(SINK_STATE_DIR))

    @property
    def root(self) -> Location:
        return self._root

    def _record_location(self, batch_id: int) -> Location:
        return self._root.child(COMMITS_DIR, f"{batch_id}.json")

    def _done_location(self, batch_id: int) -> Location:
        return self._root.child(DONE_DIR, f"{batch_id}.json")

    def describe(self, batch_id: int) -> str:
        """Where batch ``batch_id``'s record is (for error messages)."""
        return _describe(self._record_location(batch_id))

    def read(self, batch_id: int) -> CommitRecord | None:
        """Batch ``batch_id``'s commit record, ``None`` if the batch was never decided."""
        location = self._record_location(batch_id)
        try:
            data = read_bytes(location)
        except OSError as exc:
            raise CommitLogError(f"commit record {_describe(location)} is unreadable: {exc}") from exc
        if data is None:
            return None
        record = CommitRecord.from_json(data, _describe(location))
        if record.batch_id != batch_id:
            raise CommitLogError(
                f"commit record {_describe(location)} names batch {record.batch_id}"
            )
        return record

    def write(self, record: CommitRecord) -> None:
        """Make the decision for ``record.batch_id`` durable. Refuses to replace a decision."""
        location = self._record_location(record.batch_id)
        if location.filesystem.get_file_info(location.path).type != pafs.FileType.NotFound:
            raise CommitLogError(
                f"commit record {_describe(location)} already exists; a decided batch is never "
                "decided again"
            )
        atomic_write(location, record.to_json())
        logger.info(
            "batch %d decided: commit record %s with %d prepared item(s)",
            record.batch_id,
            _describe(location),
            len(record.prepared),
        )

    def mark_done(self, batch_id: int, *, commit_ms: float | None = None) -> None:
        """Record that every item of batch ``batch_id`` is committed (idempotent).

        ``commit_ms``: how long the driver's ``commit()`` took up to here, kept for benchmarks.
        """
        doc: dict[str, Any] = {"batchId": batch_id, "doneAtMs": int(time.time() * 1000)}
        if commit_ms is not None:
            doc["commitMs"] = round(commit_ms, 3)
        atomic_write(self._done_location(batch_id), json.dumps(doc).encode("utf-8"))

    def done_info(self, batch_id: int) -> dict[str, Any] | None:
        """The done marker's content (``batchId``, ``doneAtMs``, maybe ``commitMs``)."""
        location = self._done_location(batch_id)
        data = read_bytes(location)
        if data is None:
            return None
        try:
            return dict(json.loads(data.decode("utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise CommitLogError(f"done marker {_describe(location)} is unreadable: {exc!r}") from exc

    def is_done(self, batch_id: int) -> bool:
        location = self._done_location(batch_id)
        return location.filesystem.get_file_info(location.path).type == pafs.FileType.File

    def latest_before(self, batch_id: int) -> Optional[CommitRecord]:
        """The newest commit record of a batch before ``batch_id`` (exclusive), or ``None``.

        Its channel state is what barrier ``batch_id`` must replay: Spark runs a batch only
        after the previous batch's ``commit`` returned, so that record exists when it matters.
        """
        earlier = [b for b in self.decided_batch_ids() if b < batch_id]
        return self.read(earlier[-1]) if earlier else None

    def decided_batch_ids(self) -> list[int]:
        """Every batch with a commit record, ascending."""
        return numbered_files(self._root.child(COMMITS_DIR))

    def done_batch_ids(self) -> list[int]:
        return numbered_files(self._root.child(DONE_DIR))

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
        fs = self._root.filesystem
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
