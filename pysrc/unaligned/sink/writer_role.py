"""Which Spark worker process called ``DataSource.streamWriter``.

Spark 4.3 (checked with logging, pyspark 4.3.0) calls ``streamWriter`` in two kinds of Python
processes, and the sink must behave differently in each (see
:mod:`unaligned.sink.two_phase_commit`):

- :data:`PLANNER_MODULE` plans the write of *every micro-batch* (not only the first batch of a
  run): once before each batch's tasks, in a reused planner worker. The writer it returns is
  pickled into the batch's tasks. Recovery runs here.
- :data:`COMMIT_RUNNER_MODULE` runs each ``commit``/``abort`` in a new process with a new writer;
  recovery there would abort the batch being committed, so it never runs there.

:func:`writer_role` tells them apart from the call stack. ``tests/sink/test_writer_role.py``
fails if pyspark renames either module.
"""

from __future__ import annotations

import enum
import sys
from types import FrameType

PLANNER_MODULE = "pyspark.sql.worker.write_into_data_source"
COMMIT_RUNNER_MODULE = "pyspark.sql.worker.python_streaming_sink_runner"


class WriterRole(enum.Enum):
    PLANNER = "planner"
    """Planning a micro-batch's write (before its tasks): recovery runs here."""
    COMMITTER = "committer"
    """A driver process running one ``commit`` or ``abort``: never recover here."""
    OTHER = "other"
    """Not called by Spark's Python data source workers (tests, direct use): no recovery."""


def _frame_module(frame: FrameType) -> str:
    """The module a frame runs in; a worker run as ``python -m`` is ``__main__`` by name only."""
    name = str(frame.f_globals.get("__name__", ""))
    if name == "__main__":
        spec = frame.f_globals.get("__spec__")
        name = str(getattr(spec, "name", "") or name)
    return name


def writer_role(frame: FrameType | None = None) -> WriterRole:
    """Which Spark worker asked for the stream writer: the nearest worker module on the stack.

    Spark 4.3 runs ``streamWriter`` from ``pyspark.sql.worker.write_into_data_source`` (planning,
    before every micro-batch) and from ``pyspark.sql.worker.python_streaming_sink_runner`` (each
    commit/abort). Workers started by ``pyspark.daemon`` run them as imported modules; a simple
    worker runs them with ``python -m``, so ``__main__.__spec__.name`` is checked too (as
    ``pyspark.sql.worker.utils.worker_run`` does). ``tests/sink/test_writer_role.py`` fails if
    pyspark renames either module.
    """
    current: FrameType | None = frame if frame is not None else sys._getframe(1)
    while current is not None:
        module = _frame_module(current)
        if module == PLANNER_MODULE:
            return WriterRole.PLANNER
        if module == COMMIT_RUNNER_MODULE:
            return WriterRole.COMMITTER
        current = current.f_back
    return WriterRole.OTHER
