"""Channel state references: where one task's snapshot of one barrier is, and where replay starts.

Flink (FLIP-76) persists in-flight buffers with the checkpoint when a barrier overtakes them.
Here a sink task that passes ``alignedCheckpointTimeout`` stops writing to the external system,
drains the rest of its input into channel state (:mod:`unaligned.channel_state.writer`), and
returns a :class:`ChannelStateRef` in its commit message. The next batch's task with the same
index replays the state (:mod:`unaligned.channel_state.reader`) before its own input. The files
under the checkpoint and their cleanup are :mod:`unaligned.channel_state.files`.

Inline or file
    Small state travels in the commit record as an :class:`InlineChannelState` (the whole Avro
    file's bytes); larger state is a :class:`FileChannelState` naming the file. A ref is part
    of the sink's commit record, as JSON (:meth:`ChannelStateRef.to_json`).

Checks
    A file ref names the exact file its writer finished (names are unique per attempt and
    writer, :mod:`unaligned.channel_state.files`), so replay reads the committed attempt's rows
    whatever other attempts of the task wrote. Every ref also carries the writer's
    ``write_id`` and the size and CRC-32 of the Avro bytes: a file altered or replaced after
    its ref was handed out fails replay with :class:`~unaligned.errors.ChannelStateError`
    instead of replaying other rows.

Carry-forward by reference
    ``start_row`` is the position replay starts from (the first row not yet written). If a
    replay times out again, ``ref.advanced(rows_written)`` refers to the same file (or inline
    bytes) with a later ``start_row``; nothing is rewritten. ``barrier_id`` stays the barrier
    that wrote the state, whichever later barrier carries the ref. A file may be deleted only
    when no committed ref points at it any more.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from unaligned._util.fs import Location, resolve_location
from unaligned.errors import ChannelStateError

_INT_FIELDS = ("barrier_id", "task_index", "row_count", "byte_size", "crc32", "start_row")


@dataclass(frozen=True, kw_only=True)
class ChannelStateRef:
    """Where one task's channel state of one barrier is, and where replay starts.

    ``barrier_id``, ``task_index``, ``query_id`` and ``write_id`` identify the snapshot and
    must match the state's header. ``row_count`` is the total number of rows in the state,
    ``byte_size`` the size of its Avro bytes and ``crc32`` their CRC-32 (the null and deflate
    codecs have no checksum of their own). ``start_row`` is the first row replay yields (rows
    before it were already written); ``0 <= start_row <= row_count``.
    """

    barrier_id: int
    task_index: int
    query_id: str
    write_id: str
    row_count: int
    byte_size: int
    crc32: int
    start_row: int = 0

    def __post_init__(self) -> None:
        if self.row_count < 0 or self.byte_size < 0:
            raise ValueError(f"{self.describe()}: negative row_count or byte_size")
        if not 0 <= self.start_row <= self.row_count:
            raise ValueError(
                f"{self.describe()}: start_row {self.start_row} outside 0..{self.row_count}"
            )

    @property
    def remaining_rows(self) -> int:
        """Rows replay still has to yield."""
        return self.row_count - self.start_row

    @property
    def exhausted(self) -> bool:
        """True when every row has been replayed."""
        return self.start_row == self.row_count

    def advanced(self, rows_consumed: int) -> ChannelStateRef:
        """The same state with replay starting ``rows_consumed`` rows later (carry-forward)."""
        if not 0 <= rows_consumed <= self.remaining_rows:
            raise ValueError(
                f"{self.describe()}: cannot advance by {rows_consumed} rows, "
                f"{self.remaining_rows} remain"
            )
        return dataclasses.replace(self, start_row=self.start_row + rows_consumed)

    def where(self) -> str:
        """The file path or ``"inline state"``, for messages."""
        raise NotImplementedError

    def open_input(self, filesystem: pafs.FileSystem | None = None) -> Any:
        """A random-access readable file over the state's Avro bytes, not yet checked
        (:func:`~unaligned.channel_state.reader.read_channel_state` checks them);
        ChannelStateError if it cannot be opened."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"channel state {self.where()} (barrier {self.barrier_id}, task {self.task_index})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with a ``kind`` of ``inline`` or ``file`` (bytes as base64)."""
        data = dataclasses.asdict(self)
        if isinstance(self, InlineChannelState):
            data["inline_avro"] = base64.b64encode(self.inline_avro).decode("ascii")
        data["kind"] = "inline" if isinstance(self, InlineChannelState) else "file"
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ChannelStateRef:
        """Inverse of :meth:`to_dict`; ChannelStateError if ``data`` is not a ref."""
        try:
            kinds: dict[str, type[ChannelStateRef]] = {
                "inline": InlineChannelState,
                "file": FileChannelState,
            }
            cls = kinds[data["kind"]]
            kwargs = {f.name: data[f.name] for f in dataclasses.fields(cls)}
            for name in _INT_FIELDS:
                if type(kwargs[name]) is not int:
                    raise TypeError(f"{name} is not an integer")
            if cls is InlineChannelState:
                kwargs["inline_avro"] = base64.b64decode(kwargs["inline_avro"], validate=True)
            return cls(**kwargs)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            barrier = data.get("barrier_id", "?") if isinstance(data, dict) else "?"
            raise ChannelStateError(
                f"malformed channel state reference for barrier {barrier}: {exc!r}"
            ) from exc

    @staticmethod
    def from_json(text: str) -> ChannelStateRef:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ChannelStateError(f"channel state reference is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ChannelStateError("channel state reference is not a JSON object")
        return ChannelStateRef.from_dict(data)


@dataclass(frozen=True, kw_only=True)
class InlineChannelState(ChannelStateRef):
    """Channel state small enough to sit in the commit record: the whole Avro file's bytes."""

    inline_avro: bytes

    def where(self) -> str:
        return "inline state"

    def open_input(self, filesystem: pafs.FileSystem | None = None) -> Any:
        return io.BytesIO(self.inline_avro)


@dataclass(frozen=True, kw_only=True)
class FileChannelState(ChannelStateRef):
    """Channel state in a file: ``path`` in its filesystem; ``uri`` rebuilds that filesystem
    with ``FileSystem.from_uri`` (``None`` when the writer was handed a filesystem: then the
    reader must be handed the same one)."""

    path: str
    uri: str | None

    def where(self) -> str:
        return self.uri or self.path

    def location(self, filesystem: pafs.FileSystem | None = None) -> Location:
        if filesystem is not None:
            return Location(filesystem, self.path, self.uri)
        if self.uri is None:
            raise ChannelStateError(
                f"{self.describe()} was written through a caller-supplied filesystem; "
                "pass the same filesystem to read or delete it"
            )
        return resolve_location(self.uri)

    def open_input(self, filesystem: pafs.FileSystem | None = None) -> Any:
        location = self.location(filesystem)
        try:
            # fastavro's block reader asks tell(): a random-access file, not a stream.
            return location.filesystem.open_input_file(location.path)
        except FileNotFoundError as exc:
            raise ChannelStateError(f"{self.describe()} is missing") from exc
        except OSError as exc:
            raise ChannelStateError(f"{self.describe()} cannot be opened: {exc}") from exc
