"""What a Python process keeps for its life: the one pattern of the package's process-wide
caches and once-flags (a worker process's admin clients, topics' size limits, warnings logged
once, ...).

A value is kept per key; a lookup that failed raises and is asked again by the next caller, and
:meth:`ProcessMemo.forget` drops a value that turned out stale. PySpark's daemon imports the
package only after it forks a worker, so no value crosses a fork. ARCHITECTURE.md, "Module
notes", lists who keeps what.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ProcessMemo(Generic[K, V]):
    """Values by key (e.g. :func:`unaligned.kafka.clients.connections.settings_key` and a topic),
    and once-flags (:meth:`first_time`). Thread-safe."""

    def __init__(self) -> None:
        self._values: dict[K, V] = {}
        self._seen: set[K] = set()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._values.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._values[key] = value

    def forget(self, key: K) -> None:
        with self._lock:
            self._values.pop(key, None)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The kept value, else ``compute()`` kept (computed outside the lock)."""
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value

    def first_time(self, key: K) -> bool:
        """True once per key and process (a once-flag: log something once)."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True
