"""The cyclic garbage collector of a Spark Python worker, kept off the long-lived heap.

PySpark's worker daemon forks one Python worker per concurrent task and, with
``spark.python.worker.reuse`` (the default), keeps it for the next task; between two tasks it
runs ``gc.collect()`` (``pyspark/daemon.py``), a full collection that walks every object the
process holds. In a worker that has imported PySpark, pyarrow, numpy and kafka-python that is
some 75,000 objects, 70-125 ms per collection measured on this project's benchmark machine, and a
source task and a sink task each pay it: at 250,000 records per micro-batch over 8 partitions
the collections alone cost more CPU than our sink's encoding.

:func:`freeze_long_lived_heap` runs once per worker process, at the start of its first source
or sink task (everything we import is imported by then), or after the first stream writer that
Spark's planner or commit runner builds (daemon workers too, reused for every micro-batch): one
``gc.collect()`` to free what start-up left behind, then ``gc.freeze()``, which moves every
object still alive into the permanent generation that collections skip. From then on the
daemon's collection between tasks walks only the objects created since (some 4,000: modules
imported later, kept Kafka clients), about 11 ms instead of 70-125; the Python CPU of a
Kafka -> Kafka query through our source and sink fell from about 8.1 to 6.0 CPU seconds per
million records.

What freezing changes: a frozen object is still freed by reference counting as usual; only a
frozen object that later becomes part of an unreachable cycle is never reclaimed. The freeze
comes right after a full collection, once per process, so at most what one task's start-up
leaves in cycles stays: bounded, and never per task (freezing at every task would keep each
task's unpickled reader or writer forever if it sat in a cycle). Only daemon-forked workers
freeze (:func:`in_daemon_worker`); the user's driver process, the source runner (started on
its own, not by the daemon) and a test calling a reader or writer directly are left alone.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time

logger = logging.getLogger(__name__)

_DAEMON_MODULE = "pyspark.daemon"
_frozen_in_pid: int | None = None


def in_daemon_worker() -> bool:
    """Whether this process is a worker forked by PySpark's daemon (``python -m pyspark.daemon``,
    whose ``__main__`` it inherits): the only processes whose tasks are followed by the daemon's
    full collection. Elsewhere (a test, the driver, ``spark.python.use.daemon=false``, which
    starts a fresh process per task) nothing is frozen."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == _DAEMON_MODULE


def freeze_long_lived_heap() -> None:
    """In a daemon-forked worker (:func:`in_daemon_worker`), the first time this process calls
    it: collect once, then freeze every live object (a worker forked later calls it afresh: the
    pid differs)."""
    global _frozen_in_pid
    pid = os.getpid()
    if _frozen_in_pid == pid or not in_daemon_worker():
        return
    _frozen_in_pid = pid
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    logger.debug(
        "froze %d long-lived objects of Python worker %d in %.1f ms",
        gc.get_freeze_count(),
        pid,
        (time.perf_counter() - started) * 1000,
    )
