"""Filesystem locations and small atomic files, shared by every package that keeps state.

A :class:`Location` is a path in a ``pyarrow.fs`` filesystem (local, HDFS, S3, ...) plus the URI
that rebuilds it in another process. Small state files (commit records, manifests, metrics) are
written whole with :func:`atomic_write` and read with :func:`read_bytes` / :func:`read_text`.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs

from unaligned.errors import OptionError


@dataclass(frozen=True)
class Location:
    """A path in a ``pyarrow.fs`` filesystem.

    ``uri`` rebuilds the same place with ``FileSystem.from_uri`` in another process; it is
    ``None`` when the filesystem was handed in by the caller (then every reader must be handed
    the same filesystem).
    """

    filesystem: pafs.FileSystem
    path: str
    uri: str | None

    def child(self, *parts: str) -> Location:
        """The location ``parts`` below this one (``/``-separated, as in every pyarrow fs)."""
        suffix = "/".join(parts)
        path = f"{self.path.rstrip('/')}/{suffix}"
        if self.uri is None:
            return Location(self.filesystem, path, None)
        base, sep, query = self.uri.partition("?")
        return Location(self.filesystem, path, f"{base.rstrip('/')}/{suffix}{sep}{query}")


def resolve_location(location: str, filesystem: pafs.FileSystem | None = None) -> Location:
    """Resolve a checkpoint or state location.

    With ``filesystem`` given, ``location`` is a path inside it. Otherwise ``location`` is a
    URI (``file:/x`` and ``file:///x`` as Spark and Hadoop write them, ``s3://``, ...; Hadoop's
    ``s3a://``/``s3n://`` map to pyarrow's ``s3://``) or a local path (relative paths are made
    absolute against the current directory, as Spark does for a checkpoint location).
    """
    if filesystem is not None:
        return Location(filesystem, location, None)
    uri = location
    scheme, sep, rest = location.partition("://")
    if sep and scheme in ("s3a", "s3n"):
        uri = f"s3://{rest}"
    elif not sep and not location.startswith("file:"):
        uri = os.path.abspath(location)
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise OptionError(f"cannot resolve location {location!r} to a filesystem: {exc}") from exc
    return Location(fs, path, uri)


def absolute_path(path: str) -> str:
    """A local path made absolute on the driver (tasks may run elsewhere); URIs unchanged."""
    if "://" in path or path.startswith("file:"):
        return path
    return os.path.abspath(path)


def read_text(location: Location) -> str:
    """The whole (small) file at ``location`` as UTF-8; ``FileNotFoundError`` if absent."""
    with location.filesystem.open_input_stream(location.path) as stream:
        data: bytes = stream.read()
        return data.decode("utf-8")


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
        fsync_path(temporary)
    fs.move(temporary, location.path)
    if local:
        fsync_path(parent)


def fsync_path(path: str) -> None:
    """fsync a local file or directory (a directory: so a rename in it survives a power cut)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bytes(location: Location) -> bytes | None:
    """The whole file, or ``None`` if it does not exist."""
    try:
        with location.filesystem.open_input_stream(location.path) as stream:
            data: bytes = stream.read()
            return data
    except FileNotFoundError:
        return None


def numbered_files(directory: Location, suffix: str = ".json") -> list[int]:
    """Sorted ``N`` of every ``N<suffix>`` directly in ``directory`` (missing directory: none).

    ``suffix=""`` lists Spark's offset and commit logs (files named ``0``, ``1``, ...)."""
    numbered = re.compile(rf"^(\d+){re.escape(suffix)}$")
    selector = pafs.FileSelector(directory.path, allow_not_found=True, recursive=False)
    numbers = []
    for info in directory.filesystem.get_file_info(selector):
        match = numbered.match(info.base_name)
        if match and info.type == pafs.FileType.File:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def describe(location: Location) -> str:
    """The URI of ``location`` where it has one, else its path (for messages)."""
    return location.uri or location.path


def create_exclusive(location: Location, data: bytes) -> bool:
    """Write ``data`` to ``location`` whole, only if nothing is there yet; ``False`` if it was.

    On a local filesystem (and any POSIX mount, e.g. NFS or a FUSE-mounted object store) the
    file is written under a temporary name, fsynced, and hard-linked to its final name: the
    link fails if the name exists, so of two writers racing exactly one wins. Other pyarrow
    filesystems have no exclusive create; there the check and the write are two steps, and two
    writers within the same instant could both succeed (the last one's file stays).
    """
    fs = location.filesystem
    if not isinstance(fs, pafs.LocalFileSystem):
        if fs.get_file_info(location.path).type != pafs.FileType.NotFound:
            return False
        atomic_write(location, data)
        return True
    parent, _, name = location.path.rpartition("/")
    os.makedirs(parent, exist_ok=True)
    temporary = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
    with open(temporary, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    try:
        os.link(temporary, location.path)
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
    fsync_path(parent)
    return True
