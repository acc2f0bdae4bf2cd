"""tune_worker_memory (_worker_memory.py): once per daemon-forked worker process, a collection,
a freeze and glibc's trim threshold. Each case runs in a fresh Python process: both are
process-wide and would outlive the test in pytest's own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

AS_DAEMON_WORKER = """
import importlib.machinery, sys
sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec("pyspark.daemon", None)
"""


def run_python(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_collects_then_freezes_and_again_once_many_old_objects_are_unfrozen() -> None:
    run_python(
        AS_DAEMON_WORKER
        + """
import gc, weakref
from unaligned._worker_memory import FREEZE_AT_OLD_OBJECTS, in_daemon_worker, tune_worker_memory

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

assert in_daemon_worker()
gc.disable()  # only the collections below run
garbage = cycle()  # unreachable already: the collection before the freeze frees it
kept = Node()
kept.self = kept
tune_worker_memory()
assert garbage() is None
frozen = gc.get_freeze_count()
assert frozen > FREEZE_AT_OLD_OBJECTS  # the imported modules' objects, and kept
assert all(o is not kept for o in gc.get_objects())  # frozen: no collection walks it

later = cycle()  # created after the freeze: still collected as usual
gc.collect()  # as PySpark's daemon does after a task
assert later() is None

few = [Node() for _ in range(FREEZE_AT_OLD_OBJECTS // 4)]
gc.collect()  # old now, but too few to freeze again
tune_worker_memory()
assert gc.get_freeze_count() == frozen

many = [Node() for _ in range(FREEZE_AT_OLD_OBJECTS)]  # modules imported later, clients kept
gc.collect()
tune_worker_memory()
assert gc.get_freeze_count() >= frozen + FREEZE_AT_OLD_OBJECTS
assert len(gc.get_objects(generation=2)) < 100
"""
    )


def test_nothing_is_tuned_outside_a_daemon_forked_worker() -> None:
    run_python(
        """
        import gc
        from unaligned._worker_memory import tune_worker_memory, in_daemon_worker

        assert not in_daemon_worker()
        tune_worker_memory()
        assert gc.get_freeze_count() == 0
        """
    )


def test_freed_memory_is_kept_for_the_next_chunk_instead_of_faulted_in_again() -> None:
    run_python(
        AS_DAEMON_WORKER
        + """
import resource
import numpy as np
from unaligned._worker_memory import tune_worker_memory

def faults_per_chunk():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):  # a chunk: 16 MiB in 1 MiB arrays, allocated, written and freed
        arrays = [np.ones(1 << 20, np.uint8) for _ in range(16)]
        del arrays
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20

untuned = faults_per_chunk()
tune_worker_memory()
tuned = faults_per_chunk()
assert untuned > 2_000, untuned  # 4 KiB pages: 16 MiB is 4,096 of them
assert tuned < untuned / 10, (tuned, untuned)
"""
    )


def test_pyspark_daemon_still_collects_between_tasks() -> None:
    """What the tuning answers: PySpark's daemon, run as ``__main__`` (``-m pyspark.daemon``),
    collects after every task of a reused worker (pinned in ARCHITECTURE.md)."""
    import inspect

    import pyspark.daemon

    source = inspect.getsource(pyspark.daemon)
    assert "gc.collect()" in inspect.getsource(pyspark.daemon.manager)
    assert 'if __name__ == "__main__":\n    manager()' in source
