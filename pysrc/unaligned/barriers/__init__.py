"""Barriers: every micro-batch end is one (Flink FLIP-76 unaligned checkpoints).

- :mod:`.barrier`: the barrier of a batch and its deadline, read from Spark's offset log.
- :mod:`.task_side`: a sink task at its barrier (replay, write, cut, spill).
- :mod:`.driver_side`: the driver at a barrier (pending state, reassignment, garbage collection).
- :mod:`.idle`: idle barriers, which move pending state when no input arrives.
- :mod:`.metrics`: per-barrier figures.
"""
