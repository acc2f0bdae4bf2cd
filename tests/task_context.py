"""A stand-in for Spark's ``TaskContext`` as the sink's task writer reads it (the batch and query
ids from local properties, partition, attempt, task attempt id): shared by the two-phase-commit
unit tests (importable because pyproject puts tests/ on the path)."""

from __future__ import annotations

from unaligned.sink import two_phase_commit as tpc


class FakeTaskContext:
    def __init__(
        self, batch_id: int, partition_id: int, attempt: int = 0, query_id: str = "q-1"
    ) -> None:
        self._props = {tpc.BATCH_ID_PROPERTY: str(batch_id), tpc.QUERY_ID_PROPERTY: query_id}
        self._partition = partition_id
        self._attempt = attempt

    def getLocalProperty(self, key: str) -> str | None:
        return self._props.get(key)

    def partitionId(self) -> int:
        return self._partition

    def attemptNumber(self) -> int:
        return self._attempt

    def taskAttemptId(self) -> int:
        return 1000 * self._partition + self._attempt
