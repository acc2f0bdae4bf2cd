"""Memory management of a Spark Python worker, tuned once for streaming tasks.

:func:`tune_worker_memory` runs at the start of every source and sink task, and after every
stream writer Spark's planner or commit runner builds. In a daemon-forked worker only
(:func:`in_daemon_worker`) it freezes the heap once it has grown (``gc.freeze()``, so the
daemon's ``gc.collect()`` between two tasks walks only newer objects; the first freeze of a
process without collecting first, its heap then being imports) and, once per process,
sets glibc's ``mallopt`` thresholds so freed memory is kept for the next chunk. Why, what it
costs and what it saved: ARCHITECTURE.md, "Module notes", ``tuning/worker_memory.py``.
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
_frozen_in_pid: int | None = None


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
    the pid differs). The first freeze of a process collects nothing first: what it freezes is
    what the process imported and unpickled to start (a full collection there found no
    unreachable object and cost 20-190 ms in each Python process of a start or restart); every
    later freeze collects first, so garbage among what came since is freed, not frozen."""
    global _malloc_tuned_in_pid, _frozen_in_pid
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
        if _frozen_in_pid == pid:
            gc.collect()
        _frozen_in_pid = pid
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
