"""tune_worker_memory (tuning/worker_memory.py): in a daemon-forked worker process, a collection
and a freeze (again once many old objects are unfrozen) and glibc's trim threshold. Each case
runs in a fresh Python process, which prints what it saw as JSON: both settings are process-wide and
would outlive the test in pytest's own."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from typing import Any

import pyspark.daemon

from unaligned.tuning.worker_memory import FREEZE_AT_OLD_OBJECTS

AS_DAEMON_WORKER = """
import importlib.machinery, sys
sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec("pyspark.daemon", None)
"""


def observe(code: str, *, as_daemon_worker: bool) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (as a daemon-forked worker or not); it leaves what it
    saw in the dict ``seen``, returned here."""
    script = (AS_DAEMON_WORKER if as_daemon_worker else "") + textwrap.dedent(
        """
        import json
        seen = {}
        """
    )
    script += textwrap.dedent(code) + "\nprint(json.dumps(seen))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_freezes_then_collects_and_freezes_again_once_many_old_objects_are_unfrozen() -> None:
    seen = observe(
        """
        import gc, weakref
        from unaligned.tuning.worker_memory import FREEZE_AT_OLD_OBJECTS, in_daemon_worker
        from unaligned.tuning.worker_memory import tune_worker_memory

        class Node:
            pass

        def cycle():
            a, b = Node(), Node()
            a.other, b.other = b, a
            return weakref.ref(a)

        seen["in_daemon_worker"] = in_daemon_worker()
        gc.disable()  # only the collections below run
        garbage = cycle()  # unreachable already: the first freeze takes it without collecting
        kept = Node()
        kept.self = kept
        tune_worker_memory()
        seen["first_freeze_collected"] = garbage() is None
        seen["frozen"] = gc.get_freeze_count()  # the imported modules' objects, and kept
        seen["kept_walked"] = any(o is kept for o in gc.get_objects())

        later = cycle()  # created after the freeze: still collected as usual
        gc.collect()  # as PySpark's daemon does after a task
        seen["later_freed"] = later() is None

        few = [Node() for _ in range(FREEZE_AT_OLD_OBJECTS // 4)]
        gc.collect()  # old now, but too few to freeze again
        tune_worker_memory()
        seen["frozen_after_few"] = gc.get_freeze_count()

        many = [Node() for _ in range(FREEZE_AT_OLD_OBJECTS)]  # modules imported later...
        gc.collect()
        old_garbage = cycle()
        tune_worker_memory()  # a later freeze: collects first
        seen["later_freeze_collected"] = old_garbage() is None
        seen["frozen_after_many"] = gc.get_freeze_count()
        seen["old_after_many"] = len(gc.get_objects(generation=2))
        """,
        as_daemon_worker=True,
    )
    assert seen["in_daemon_worker"]
    assert not seen["first_freeze_collected"]
    assert seen["later_freeze_collected"]
    assert seen["frozen"] > FREEZE_AT_OLD_OBJECTS
    assert not seen["kept_walked"]  # frozen: no collection walks it
    assert seen["later_freed"]
    assert seen["frozen_after_few"] == seen["frozen"]
    assert seen["frozen_after_many"] >= seen["frozen"] + FREEZE_AT_OLD_OBJECTS
    assert seen["old_after_many"] < 100


def test_nothing_is_tuned_outside_a_daemon_forked_worker() -> None:
    seen = observe(
        """
        import gc
        from unaligned.tuning.worker_memory import in_daemon_worker, tune_worker_memory

        seen["in_daemon_worker"] = in_daemon_worker()
        tune_worker_memory()
        seen["frozen"] = gc.get_freeze_count()
        """,
        as_daemon_worker=False,
    )
    assert seen == {"in_daemon_worker": False, "frozen": 0}


def test_freed_memory_is_kept_for_the_next_chunk_instead_of_faulted_in_again() -> None:
    seen = observe(
        """
        import resource
        import numpy as np
        from unaligned.tuning.worker_memory import tune_worker_memory

        def faults_per_chunk():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(20):  # a chunk: 16 MiB in 1 MiB arrays, allocated, written, freed
                arrays = [np.ones(1 << 20, np.uint8) for _ in range(16)]
                del arrays
            return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20

        seen["untuned"] = faults_per_chunk()
        tune_worker_memory()
        seen["tuned"] = faults_per_chunk()
        """,
        as_daemon_worker=True,
    )
    assert seen["untuned"] > 2_000  # 4 KiB pages: 16 MiB is 4,096 of them
    assert seen["tuned"] < seen["untuned"] / 10


def test_pyspark_daemon_still_collects_between_tasks() -> None:
    """What the tuning answers: PySpark's daemon, run as ``__main__`` (``-m pyspark.daemon``),
    collects after every task of a reused worker (pinned in ARCHITECTURE.md)."""
    assert "gc.collect()" in inspect.getsource(pyspark.daemon.manager)
    assert 'if __name__ == "__main__":\n    manager()' in inspect.getsource(pyspark.daemon)
