"""Exactly-once Kafka streaming for PySpark with Flink-style unaligned checkpoints.

``spark.readStream.format("unaligned")`` reads Kafka (a drop-in for Spark's Kafka source);
``df.writeStream.format("unaligned")`` writes to Kafka transactions or Parquet files with a
two-phase commit. The manual is in docs/ (the site `./dev docs` builds).

Importing the package is light (Spark imports it in every Python process that looks up or
creates the data source): :func:`await_finished`, :func:`stop` and :func:`monitor` load their
modules (checkpoint files through ``pyarrow.fs``, query listeners) on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unaligned.data_source import FORMAT_NAME, UnalignedDataSource, register

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow
    import pyarrow.fs

    from unaligned.finishing import await_finished, stop
    from unaligned.monitoring import monitor

__all__ = [
    "FORMAT_NAME",
    "UnalignedDataSource",
    "await_finished",
    "monitor",
    "register",
    "read_committed_files",
    "stop",
]
__version__ = "0.2.0.dev0"

#: Public names whose modules load on first access (PEP 562), not with the package.
_LAZY = {
    "await_finished": "unaligned.finishing",
    "stop": "unaligned.finishing",
    "monitor": "unaligned.monitoring",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'unaligned' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def read_committed_files(
    path: str,
    *,
    columns: Sequence[str] | None = None,
    filesystem: pyarrow.fs.FileSystem | None = None,
) -> pyarrow.Table:
    """Read every row the file sink committed under ``path`` (and nothing uncommitted).

    ``columns`` reads only those columns; ``filesystem`` (a ``pyarrow.fs.FileSystem``) makes
    ``path`` a path inside it. See the docs, "Python API".
    """
    from unaligned.sink.files.committed_files import read_committed_files as _read

    return _read(path, columns=columns, filesystem=filesystem)
