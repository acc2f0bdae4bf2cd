"""Channel state on disk: the directory layout under the state directory, naming, listing, deletion.

Each query keeps its state under ``<channelStatePath>/<query id>/`` (:func:`query_state_dir`;
queries may share a ``channelStatePath``), one directory per barrier, one file per writer:
``barrier-<N>/task-<index>.attempt-<attempt>.<writeId>.avro`` (``.tmp`` while it is written,
then renamed), so no attempt replaces another's file. :func:`list_barrier_ids` and
:func:`list_state_files` find every file, :func:`delete_barrier_state` and
:func:`delete_channel_state` remove them (idempotent); garbage collection is the sink's
(:mod:`unaligned.sink.barrier_outcome`). The rules: ARCHITECTURE.md, "Module notes",
``channel_state/files.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.fs as pafs

from unaligned._util.fs import resolve_location
from unaligned.channel_state.refs import ChannelStateRef, FileChannelState
from unaligned.errors import ChannelStateError

ATTEMPT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
"""What a writer's ``attempt`` (and ``write_id``, and a query id) may be: they become part of
file and directory names."""
_NAME = r"[A-Za-z0-9_-]+"
_FINAL_NAME = re.compile(rf"^task-(\d+)\.attempt-({_NAME})\.({_NAME})\.avro$")
_TEMP_NAME = re.compile(rf"^task-(\d+)\.attempt-({_NAME})\.({_NAME})\.avro\.tmp$")
_BARRIER_DIR = re.compile(r"^barrier-(\d+)$")


# --- naming ---------------------------------------------------------------------------------------


def query_state_dir(root: str, query_id: str) -> str:
    """The directory of one query's channel state under ``root`` (``channelStatePath``)."""
    if not ATTEMPT_NAME.match(query_id):
        raise ChannelStateError(
            f"query id {query_id!r} cannot name a channel-state directory under {root}: "
            "it must match [A-Za-z0-9_-]+"
        )
    return f"{root.rstrip('/')}/{query_id}"


def barrier_dir_name(barrier_id: int) -> str:
    return f"barrier-{barrier_id}"


def state_file_name(task_index: int, attempt: str, write_id: str) -> str:
    """The finished file of one writer (one attempt of a task, one write)."""
    return f"task-{task_index}.attempt-{attempt}.{write_id}.avro"


def temp_file_name(task_index: int, attempt: str, write_id: str) -> str:
    """The same writer's file while it is being written."""
    return f"{state_file_name(task_index, attempt, write_id)}.tmp"


def _parse_name(name: str) -> tuple[int, str, str, bool] | None:
    """(task index, attempt, write id, finished) of a state file's name; ``None`` if it is not
    one."""
    for pattern, finished in ((_FINAL_NAME, True), (_TEMP_NAME, False)):
        match = pattern.match(name)
        if match:
            return int(match.group(1)), match.group(2), match.group(3), finished
    return None


# --- listing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateFile:
    """A file found under a barrier's directory.

    ``finished`` is False for a temporary file (an attempt that never finished, or is still
    running). ``attempt`` and ``write_id`` come from the name.
    """

    path: str
    barrier_id: int
    task_index: int
    attempt: str | None
    size_bytes: int
    finished: bool = True
    write_id: str | None = None


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
        parsed = _parse_name(info.base_name)
        if parsed is None:
            continue
        task_index, attempt, write_id, finished = parsed
        found.append(
            StateFile(info.path, barrier_id, task_index, attempt, info.size, finished, write_id)
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
