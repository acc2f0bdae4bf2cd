"""Barriers: every micro-batch end is one (Flink FLIP-76 unaligned checkpoints).

- :mod:`.barrier`: the barrier of a batch and its deadline, read from Spark's offset log.
- :mod:`.offset_log`: Spark's offset log, where the barrier's start and tokens are read.
- :mod:`.alignment`: a sink task at its barrier (replay, write, cut, spill).
- :mod:`.chunking`: the chunk sizes a task writes between two deadline checks.
- :mod:`.idle`: idle barriers, which move pending state when no input arrives.
- :mod:`.metrics`: per-barrier figures.

What the driver does at a barrier is the sink's (:mod:`unaligned.sink.barrier_outcome`).
"""
