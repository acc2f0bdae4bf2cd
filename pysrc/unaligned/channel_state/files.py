"""Channel state on disk: the directory layout under the state directory, naming, listing, deletion.

Layout (``state_dir`` is the sink's channel-state directory under the checkpoint,
``channelStatePath``)::

    <state_dir>/barrier-<barrierId>/task-<index>.avro                        finished
    <state_dir>/barrier-<barrierId>/task-<index>.attempt-<attempt>.avro.tmp  being written

Write-then-rename
    One file per (barrier, task). The writer (:mod:`unaligned.channel_state.writer`) writes
    the temporary name and renames it to the final name when it finishes, so nobody sees half
    a file. ``<attempt>`` ([A-Za-z0-9_-]+, :data:`ATTEMPT_NAME`) is unique among concurrently
    running attempts of the task. Only the committed attempt's ref is in the sink's commit
    record; a retried attempt overwrites the final file before returning its own ref (the
    ref's ``write_id``, size and CRC-32 make replay of a replaced file fail, see
    :mod:`unaligned.channel_state.refs`).

Listing and garbage
    Temporary files of failed attempts stay until the sink's cleanup removes them:
    :func:`list_barrier_ids` and :func:`list_state_files` find every file (finished and
    temporary), :func:`delete_barrier_state` removes a barrier's whole directory and
    :func:`delete_channel_state` the files of given refs. Both deletions are idempotent. A
    file may be deleted only when no committed ref (carried-forward refs included) points at
    it any more; carried-forward refs share their file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.fs as pafs

from unaligned._fs import resolve_location
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState

ATTEMPT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
"""What a writer's ``attempt`` may be: it becomes part of the temporary file's name."""
_FINAL_NAME = re.compile(r"^task-(\d+)\.avro$")
_TEMP_NAME = re.compile(r"^task-(\d+)\.attempt-([A-Za-z0-9_-]+)\.avro\.tmp$")
_BARRIER_DIR = re.compile(r"^barrier-(\d+)$")


# --- naming ---------------------------------------------------------------------------------------


def barrier_dir_name(barrier_id: int) -> str:
    return f"barrier-{barrier_id}"


def state_file_name(task_index: int) -> str:
    return f"task-{task_index}.avro"


def temp_file_name(task_index: int, attempt: str) -> str:
    return f"task-{task_index}.attempt-{attempt}.avro.tmp"


# --- listing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateFile:
    """A file found under a barrier's directory.

    ``attempt`` is set for a temporary file (an attempt that never finished, or is still
    running) and ``None`` for a finished ``task-<index>.avro``.
    """

    path: str
    barrier_id: int
    task_index: int
    attempt: str | None
    size_bytes: int


def list_state_files(
    state_dir: str, barrier_id: int, filesystem: pafs.FileSystem | None = None
) -> list[StateFile]:
    """Every channel-state file (finished and temporary) of ``barrier_id``, sorted by path."""
    location = resolve_location(state_dir, filesystem).child(barrier_dir_name(barrier_id))
    selector = pafs.FileSelector(location.path, allow_not_found=True)
    found = []
    for info in location.filesystem.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        final, temp = _FINAL_NAME.match(info.base_name), _TEMP_NAME.match(info.base_name)
        if final:
            found.append(StateFile(info.path, barrier_id, int(final.group(1)), None, info.size))
        elif temp:
            found.append(
                StateFile(info.path, barrier_id, int(temp.group(1)), temp.group(2), info.size)
            )
    return sorted(found, key=lambda f: f.path)


def list_barrier_ids(state_dir: str, filesystem: pafs.FileSystem | None = None) -> list[int]:
    """Ids of the barriers that have a directory under ``state_dir``, ascending."""
    location = resolve_location(state_dir, filesystem)
    selector = pafs.FileSelector(location.path, allow_not_found=True)
    ids = []
    for info in location.filesystem.get_file_info(selector):
        match = _BARRIER_DIR.match(info.base_name)
        if match and info.type == pafs.FileType.Directory:
            ids.append(int(match.group(1)))
    return sorted(ids)


# --- deletion -------------------------------------------------------------------------------------


def delete_channel_state(
    refs: Iterable[ChannelStateRef], filesystem: pafs.FileSystem | None = None
) -> int:
    """Delete the files of ``refs`` (inline refs have none); idempotent. Returns files removed.

    Call only for refs no committed record still needs (carried-forward refs share a file).
    """
    removed = 0
    for ref in refs:
        if not isinstance(ref, FileChannelState):
            continue
        location = ref.location(filesystem)
        try:
            location.filesystem.delete_file(location.path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def delete_barrier_state(
    state_dir: str, barrier_id: int, filesystem: pafs.FileSystem | None = None
) -> None:
    """Remove ``barrier-<id>/`` with every file in it (finished and stale); idempotent.

    Only once no committed ref (carried-forward refs included) points into that barrier."""
    location = resolve_location(state_dir, filesystem).child(barrier_dir_name(barrier_id))
    try:
        location.filesystem.delete_dir(location.path)
    except FileNotFoundError:
        pass
