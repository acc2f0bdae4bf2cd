"""Memory management of a Spark Python worker, tuned once for streaming tasks.

PySpark's worker daemon forks one Python worker per concurrent task and, with
``spark.python.worker.reuse`` (the default), keeps it for the next task. Two defaults then cost
more CPU than our sink's encoding, both measured on this project's benchmark machine
(250,000 records per micro-batch over 8 partitions, Kafka -> Kafka through our source and sink):

- **Garbage collection.** Between two tasks the daemon runs ``gc.collect()``
  (``pyspark/daemon.py``), a full collection that walks every object the process holds: some
  75,000 in a worker that has imported PySpark, pyarrow, numpy and kafka-python, 70-125 ms per
  task.
- **Freed memory handed back.** glibc's ``malloc`` returns the top of its heap to the kernel once
  more than ``M_TRIM_THRESHOLD`` of it is free (by default a few MiB, adjusted as it goes); a
  task allocates and frees megabytes per chunk (Kafka fetch buffers, Arrow and numpy arrays,
  encoded batches), so each chunk takes its memory again as fresh pages that the kernel must
  fault in and zero. A sink task of 31,250 records outside Spark: 3,700-3,900 page faults and
  9-10 ms of system time, 28 ms of CPU in all.

:func:`tune_worker_memory` runs once per worker process, at the start of its first source or
sink task (everything we import is imported by then), or after the first stream writer that
Spark's planner or commit runner builds (daemon workers too, reused for every micro-batch):

1. ``gc.collect()`` to free what start-up left behind, then ``gc.freeze()``: every object still
   alive moves into the permanent generation that collections skip, so the daemon's collection
   between tasks walks only the objects created since (some 4,000: modules imported later, kept
   Kafka clients), about 11 ms instead of 70-125. A frozen object is still freed by reference
   counting as usual; only a frozen object that later becomes part of an unreachable cycle is
   never reclaimed. The freeze comes right after a full collection, once per process, so at
   most what one task's start-up leaves in cycles stays: bounded, never per task (freezing at
   every task would keep each task's unpickled reader or writer forever if it sat in a cycle).
2. ``mallopt``: allocations below ``MMAP_THRESHOLD`` come from the heap, and up to
   ``TRIM_THRESHOLD`` of free heap is kept for the next chunk instead of being handed back: the
   same task, 0 page faults, 1-2 ms of system time, 18-20 ms of CPU. A worker may so hold up to
   that much freed memory between tasks. Only where the C library has glibc's ``mallopt``;
   elsewhere this step is skipped.

Together, the Python CPU of the query above fell from about 8.1 to 6.0 CPU seconds per million
records with the first step alone. Only daemon-forked workers are tuned
(:func:`in_daemon_worker`); the user's driver process, the source runner (started on its own,
not by the daemon) and a test calling a reader or writer directly are left alone.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys
import time

logger = logging.getLogger(__name__)

_DAEMON_MODULE = "pyspark.daemon"
#: glibc's ``mallopt`` parameters (``malloc.h``) and the values set.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20

_tuned_in_pid: int | None = None


def in_daemon_worker() -> bool:
    """Whether this process is a worker forked by PySpark's daemon (``python -m pyspark.daemon``,
    whose ``__main__`` it inherits): the only processes whose tasks are followed by the daemon's
    full collection. Elsewhere (a test, the driver, ``spark.python.use.daemon=false``, which
    starts a fresh process per task) nothing is tuned."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == _DAEMON_MODULE


def tune_worker_memory() -> None:
    """Steps 1 and 2 of the module docstring, in a daemon-forked worker
    (:func:`in_daemon_worker`), the first time this process calls it (a worker forked later
    calls it afresh: the pid differs)."""
    global _tuned_in_pid
    pid = os.getpid()
    if _tuned_in_pid == pid or not in_daemon_worker():
        return
    _tuned_in_pid = pid
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    kept = keep_freed_heap()
    logger.debug(
        "Python worker %d: froze %d long-lived objects, %s, in %.1f ms",
        pid,
        gc.get_freeze_count(),
        "keeps freed heap" if kept else "no mallopt here",
        (time.perf_counter() - started) * 1000,
    )


def keep_freed_heap() -> bool:
    """Step 2: set glibc's thresholds (module docstring); whether the C library took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
