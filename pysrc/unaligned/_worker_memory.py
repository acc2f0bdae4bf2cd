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

:func:`tune_worker_memory` runs at the start of every source and sink task, and after every
stream writer that Spark's planner or commit runner builds (daemon workers too, reused for every
micro-batch):

1. When more than ``FREEZE_AT_OLD_OBJECTS`` unfrozen objects are old (generation 2: they lived
   through a collection; on the first call, PySpark's and our imports): ``gc.collect()`` to free
   the garbage among them, then ``gc.freeze()``, which moves every object still alive into the
   permanent generation that collections skip. The daemon's collection between tasks then walks
   only the objects created since (under 5,000: the next freeze takes in modules imported later
   and Kafka clients a worker keeps), 1-10 ms instead of 70-125. A frozen object is still freed
   by reference counting as usual; only a frozen object that later becomes part of an
   unreachable cycle is never reclaimed: what one task's start-up leaves in cycles, at most once
   per freeze, and freezes stop when the heap stops growing (freezing at every task would keep
   every task's unpickled reader or writer forever if it sat in a cycle).
2. Once per process, ``mallopt``: allocations below ``MMAP_THRESHOLD`` come from the heap, and up
   to ``TRIM_THRESHOLD`` of free heap is kept for the next chunk instead of being handed back:
   the same task, 0 page faults, 1-2 ms of system time, 18-20 ms of CPU. A worker may so hold up
   to that much freed memory between tasks. Only where the C library has glibc's ``mallopt``;
   elsewhere this step is skipped.

Measured with ``./dev bench kafka-sink`` at 5,000,000 records: the Python CPU of the query
through our source and sink went from 8.0-8.8 CPU seconds per million records to 5.3-5.7 with
step 1 and 2.7-3.2 with both (the same source feeding Spark's own sink: 4.5-5.3 -> 1.6-2.0).

Only daemon-forked workers are tuned (:func:`in_daemon_worker`); the user's driver process, the
source runner (started on its own, not by the daemon) and a test calling a reader or writer
directly are left alone.
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

#: Old (generation 2) objects beyond which the next call collects and freezes (step 1).
FREEZE_AT_OLD_OBJECTS = 5_000

_malloc_tuned_in_pid: int | None = None


def in_daemon_worker() -> bool:
    """Whether this process is a worker forked by PySpark's daemon (``python -m pyspark.daemon``,
    whose ``__main__`` it inherits): the only processes whose tasks are followed by the daemon's
    full collection. Elsewhere (a test, the driver, ``spark.python.use.daemon=false``, which
    starts a fresh process per task) nothing is tuned."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == _DAEMON_MODULE


def tune_worker_memory() -> None:
    """Steps 1 and 2 of the module docstring, in a daemon-forked worker
    (:func:`in_daemon_worker`); step 2 once per process (a worker forked later takes it afresh:
    the pid differs)."""
    global _malloc_tuned_in_pid
    if not in_daemon_worker():
        return
    pid = os.getpid()
    if _malloc_tuned_in_pid != pid:
        _malloc_tuned_in_pid = pid
        if not keep_freed_heap():
            logger.debug("Python worker %d: no glibc mallopt, freed memory is handed back", pid)
    old = len(gc.get_objects(generation=2))
    if old > FREEZE_AT_OLD_OBJECTS:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        logger.debug(
            "Python worker %d: %d old objects, %d frozen in all, in %.1f ms",
            pid,
            old,
            gc.get_freeze_count(),
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
