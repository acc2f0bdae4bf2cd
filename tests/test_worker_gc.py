"""freeze_long_lived_heap (_worker_gc.py): once per daemon-forked worker process, after a
collection. Each case runs in a fresh Python process: freezing is process-wide and would outlive
the test in pytest's own."""

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


def test_garbage_is_collected_before_the_rest_is_frozen_once_per_process() -> None:
    run_python(
        AS_DAEMON_WORKER
        + """
import gc, os, weakref
from unaligned._worker_gc import freeze_long_lived_heap, in_daemon_worker

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
freeze_long_lived_heap()
assert garbage() is None
frozen = gc.get_freeze_count()
assert frozen > 1000  # the imported modules' objects, and kept
assert all(o is not kept for o in gc.get_objects())  # frozen: no collection walks it

later = cycle()  # created after the freeze: still collected as usual
freeze_long_lived_heap()  # a second call in this process does nothing
assert gc.get_freeze_count() == frozen and later() is not None
gc.collect()
assert later() is None

pid = os.fork()
if pid == 0:  # a forked worker freezes afresh, what it inherited included
    extra = [Node() for _ in range(10)]
    freeze_long_lived_heap()
    os._exit(0 if gc.get_freeze_count() >= frozen + 10 else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
"""
    )


def test_nothing_is_frozen_outside_a_daemon_forked_worker() -> None:
    run_python(
        """
        import gc
        from unaligned._worker_gc import freeze_long_lived_heap, in_daemon_worker

        assert not in_daemon_worker()
        freeze_long_lived_heap()
        assert gc.get_freeze_count() == 0
        """
    )
