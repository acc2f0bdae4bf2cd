"""A query's checkpoint directory: every path under ``<checkpoint>/``, resolved once.

:class:`Checkpoint` is built from the ``checkpointLocation`` string at the package's boundary
(the sink's options, :func:`unaligned.stop`, :func:`unaligned.await_finished`, the CLI) and
handed down; no other module spells a path under the checkpoint. It names Spark's files
(``metadata``, ``offsets/<N>``, ``commits/<N>``) and the package's own under ``unaligned/``
(commit records, done markers, metrics, ``finished.json``, ``stop.json``, the source's
heartbeat, the default channel-state directory), with the ``pyarrow.fs`` filesystem they live
in. What each file holds: ARCHITECTURE.md, "Checkpoint layout".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from unaligned._util.fs import (
    Location,
    absolute_path,
    numbered_files,
    read_bytes,
    read_text,
    resolve_location,
)
from unaligned.errors import BarrierError

QUERY_METADATA_FILE = "metadata"
STATE_DIR = "unaligned"
"""The directory under the checkpoint that holds everything the package keeps."""


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint at ``location`` (as the user gave it: links and messages keep it so) and
    its resolved ``root``. Pickles as its location string when that rebuilds it (Spark pickles
    the sink's options into tasks); a checkpoint in a filesystem the caller handed in pickles
    with that filesystem."""

    location: str
    root: Location

    @classmethod
    def resolve(cls, location: str, filesystem: pafs.FileSystem | None = None) -> Checkpoint:
        """Resolve ``location`` once (:func:`unaligned._util.fs.resolve_location`)."""
        return cls(location, resolve_location(location, filesystem))

    def __reduce__(self) -> tuple[Any, ...]:
        if self.root.uri is None:
            return (Checkpoint, (self.location, self.root))
        return (Checkpoint.resolve, (self.location,))

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self.root.filesystem

    def describe(self) -> str:
        """The location as the user gave it (for messages)."""
        return self.location

    # --- Spark's files ------------------------------------------------------------------------

    @property
    def metadata(self) -> Location:
        """``metadata``: ``{"id": <query id>}``, written by Spark before the first batch."""
        return self.root.child(QUERY_METADATA_FILE)

    @property
    def offsets_dir(self) -> Location:
        return self.root.child("offsets")

    def offsets(self, batch_id: int) -> Location:
        """``offsets/<N>``: Spark's offset log entry of batch ``N``."""
        return self.offsets_dir.child(str(batch_id))

    @property
    def spark_commits_dir(self) -> Location:
        return self.root.child("commits")

    def spark_commit(self, batch_id: int) -> Location:
        """``commits/<N>``: Spark ran batch ``N`` to its end."""
        return self.spark_commits_dir.child(str(batch_id))

    # --- the package's files, under unaligned/ ------------------------------------------------

    @property
    def state_dir(self) -> Location:
        """``unaligned/``: everything the package keeps."""
        return self.root.child(STATE_DIR)

    @property
    def commit_records_dir(self) -> Location:
        return self.state_dir.child("commits")

    def commit_record(self, batch_id: int) -> Location:
        return self.commit_records_dir.child(f"{batch_id}.json")

    @property
    def done_markers_dir(self) -> Location:
        return self.state_dir.child("done")

    def done_marker(self, batch_id: int) -> Location:
        return self.done_markers_dir.child(f"{batch_id}.json")

    @property
    def abandoned_notes_dir(self) -> Location:
        return self.state_dir.child("abandoned")

    def abandoned_note(self, batch_id: int) -> Location:
        """What an operator's ``unaligned abandon`` did to a decided batch."""
        return self.abandoned_notes_dir.child(f"{batch_id}.json")

    @property
    def metrics_dir(self) -> Location:
        return self.state_dir.child("metrics")

    @property
    def finished_marker(self) -> Location:
        return self.state_dir.child("finished.json")

    @property
    def stop_request(self) -> Location:
        return self.state_dir.child("stop.json")

    @property
    def table_target(self) -> Location:
        """The Iceberg or Delta table the sink writes (``sink/tables/table_record.py``)."""
        return self.state_dir.child("table-target.json")

    @property
    def source_heartbeat(self) -> Location:
        return self.state_dir.child("source-heartbeat.json")

    def default_channel_state_path(self) -> str:
        """``channelStatePath`` when the option is not set: ``<checkpoint>/unaligned/
        channel-state`` (a path or URI string: channel-state refs record it)."""
        return absolute_path(f"{self.location.rstrip('/')}/{STATE_DIR}/channel-state")

    # --- questions about Spark's files ---------------------------------------------------------

    def exists(self) -> bool:
        return bool(self.filesystem.get_file_info(self.root.path).type != pafs.FileType.NotFound)

    def has_metadata(self) -> bool:
        info = self.filesystem.get_file_info(self.metadata.path)
        return bool(info.type == pafs.FileType.File)

    def has_state_dir(self) -> bool:
        info = self.filesystem.get_file_info(self.state_dir.path)
        return bool(info.type == pafs.FileType.Directory)

    def query_id(self) -> str:
        """The query id from ``metadata``; :class:`BarrierError` when it is missing or bad."""
        location = self.metadata
        name = location.uri or location.path
        try:
            text = read_text(location)
        except FileNotFoundError as exc:
            raise BarrierError(f"query metadata {name} does not exist") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise BarrierError(f"query metadata {name} is unreadable: {exc}") from exc
        try:
            query_id = json.loads(text.split("\n")[0])["id"]
        except (IndexError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise BarrierError(f"query metadata {name} has no JSON 'id'") from exc
        if not isinstance(query_id, str) or not query_id:
            raise BarrierError(f"query metadata {name}: 'id' is not a non-empty string")
        return query_id

    def logged_batches(self) -> list[int]:
        """Every batch id in Spark's offset log, ascending."""
        return numbered_files(self.offsets_dir, "")

    def spark_committed_batches(self) -> list[int]:
        """Every batch id in Spark's commit log, ascending."""
        return numbered_files(self.spark_commits_dir, "")

    def last_logged_batch(self) -> int | None:
        """The highest batch id in Spark's offset log (planned, maybe not run), or ``None``."""
        ids = self.logged_batches()
        return ids[-1] if ids else None

    def spark_committed(self, batch_id: int) -> bool:
        """Whether Spark's commit log holds ``batch_id`` (the batch ran to its end)."""
        return read_bytes(self.spark_commit(batch_id)) is not None
