"""The demo (``unaligned demo``, the main command of a checkout).

- :mod:`.story`: the whole story on the embedded broker, step by step, with its summary.
- :mod:`.query_run`: the demo's query, in a process of its own so that the story can kill it.
"""
