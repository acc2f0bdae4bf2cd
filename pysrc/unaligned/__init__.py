"""Exactly-once Kafka streaming for PySpark with Flink-style unaligned checkpoints.

``spark.readStream.format("unaligned")`` reads Kafka (a drop-in for Spark's Kafka source);
``df.writeStream.format("unaligned")`` writes to Kafka transactions or Parquet files with a
two-phase commit. See README.md for options and guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unaligned.data_source import FORMAT_NAME, UnalignedDataSource, register
from unaligned.finishing import await_finished, stop
from unaligned.monitoring import monitor

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "FORMAT_NAME",
    "UnalignedDataSource",
    "await_finished",
    "monitor",
    "register",
    "read_committed_files",
    "stop",
]
__version__ = "0.1.0"


def read_committed_files(path: str, **kwargs: Any) -> pyarrow.Table:
    """Read every row the file sink committed under ``path`` (and nothing uncommitted)."""
    from unaligned.sink.committed_files import read_committed_files as _read

    return _read(path, **kwargs)
