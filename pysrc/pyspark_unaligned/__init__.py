"""Auto-registration hook: Spark imports installed top-level modules named ``pyspark_*`` on the
first Python data source lookup and registers their ``DefaultSource`` under its ``name()``.

With the package installed, ``spark.readStream.format("unaligned")`` works with no register call.
"""

from unaligned.data_source import UnalignedDataSource as DefaultSource

__all__ = ["DefaultSource"]
