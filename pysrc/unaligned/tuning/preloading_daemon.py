"""Opt-in: Spark's Python daemon with pyspark's worker and kafka-python imported before it forks.

Spark runs each executor's Python tasks in workers forked from one daemon per executor
(``python -m pyspark.daemon pyspark.worker``). The daemon imports the worker module only after
each fork, so that no thread exists when it forks (pyarrow and numpy start threads when they are
imported): every new worker, the first tasks of every start and restart included, imports
``pyspark.worker`` (0.5 s from a ``pyspark.zip`` without bytecode), kafka-python and our task
modules again.

With ``spark.python.daemon.module=unaligned.tuning.preloading_daemon`` (a Spark setting, read
when the application starts), this module is the daemon: it imports :data:`PRELOADED`
(modules that start no thread), checks that the process still has one thread, then runs
``pyspark.daemon``'s manager unchanged. Workers forked from it find those modules loaded. Spark
reads the setting where it starts task workers; its planners and the source runner keep
``pyspark.daemon`` (so Spark's source reads). docs/operations/sizing.md, "Start-up and
restarts", has the measured effect.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Sequence

#: Imported by the daemon before it forks: pure Python, no thread started (a test checks each).
#: Named, never imported statically: this entry point sits below the modules it names.
PRELOADED: tuple[str, ...] = (
    "pyspark.worker",
    "kafka",
    "kafka.admin",
    "kafka.codec",
    "kafka.record",
    "kafka.protocol.consumer",
    "kafka.protocol.metadata",
    "kafka.protocol.producer",
    # Our modules a source or sink task loads that import neither pyarrow nor numpy (issue 35:
    # about 50 ms of imports, most of it creating their frozen dataclasses, in each new worker).
    "unaligned.data_source",
    "unaligned.tuning.worker_memory",
    "unaligned.kafka.clients.admin_clients",
    "unaligned.kafka.clients.offset_lookup",
    "unaligned.kafka.fetch.fetch_connections",
    "unaligned.kafka.fetch.range_fetch",
    "unaligned.kafka.produce.topic_limits",
    "unaligned.kafka.transactions.transaction_coordinator",
    "unaligned.sink.topics.kafka_id_pool",
    "unaligned.sink.topics.kafka_items",
    "unaligned.source.lost_records",
    "unaligned.source.planning.offset_ranges",
    "unaligned.channel_state.codecs",
    "unaligned.barriers.idle",
)


def os_threads() -> int:
    """Threads of this process as the kernel counts them (Linux ``/proc``), else Python's."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def preload(modules: Sequence[str] = PRELOADED) -> None:
    """Import ``modules``; raise :class:`RuntimeError` if the process then runs more than one
    thread (forking it could leave a child holding a lock that no thread will release)."""
    for name in modules:
        importlib.import_module(name)
    threads = os_threads()
    if threads != 1:
        raise RuntimeError(
            f"unaligned.tuning.preloading_daemon: importing {', '.join(modules)} left {threads} "
            "threads in the daemon, which must fork with one; remove the Spark setting "
            "spark.python.daemon.module to use pyspark.daemon"
        )


def main() -> None:
    """Preload, then serve as ``pyspark.daemon`` (which reads the worker module from argv)."""
    preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
