"""How a produce session's producer writes: inside a transaction, or idempotent only.

:class:`~unaligned.kafka.produce.produce_session.ProduceSession` sends the same ``Produce``
requests either way (producer id, epoch and per-partition sequences, ``acks=all``, retried with
the same sequences, so a batch is written once per session). What differs is its
:class:`ProducerMode`, which the session asks at each step:

=====================  =============================================  =============================
step                   :class:`InTransaction` (exactly-once sink)     :class:`Idempotent`
                                                                      (at-least-once sink)
=====================  =============================================  =============================
1. ``InitProducerId``  on the transactional id, at its coordinator:   without a transactional id,
                       an older producer of the id is fenced          at any broker
2. a new partition     ``AddPartitionsToTxn`` before its first batch  nothing
batches                marked transactional; readers see them once    visible once acknowledged
                       the driver commits
4. prepare             a :class:`PreparedTransaction` (still open)    :class:`WrittenRecords`
after a failure        the transaction is aborted (``EndTxn``)        nothing to end: what was
                                                                      acknowledged stays
=====================  =============================================  =============================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from unaligned.kafka.transactions import transaction_coordinator
from unaligned.kafka.transactions.coordinator_requests import CoordinatorRequests
from unaligned.kafka.transactions.transactions import PreparedTransaction

W = TypeVar("W", covariant=True)


@dataclass(frozen=True)
class WrittenRecords:
    """What an idempotent session wrote: ``record_count`` records, all acknowledged (so
    visible), by producer ``producer_id`` at ``epoch``."""

    producer_id: int
    epoch: int
    record_count: int

    def describe(self) -> str:
        return f"idempotent producer id {self.producer_id} (epoch {self.epoch})"


class ProducerMode(Protocol[W]):
    """What differs between a transactional and an idempotent session (module docstring);
    ``W``: what :meth:`written` describes the session's records as."""

    @property
    def transactional_id(self) -> str | None:
        """What the ``Produce`` requests carry (``None``: no transaction)."""
        ...

    @property
    def transactional_batches(self) -> bool:
        """Whether the batches' transactional attribute is set."""
        ...

    def describe(self) -> str:
        """The session in messages: ``transaction 'id'`` or ``the idempotent producer``."""
        ...

    async def init_producer_id(
        self, calls: CoordinatorRequests, deadline: float
    ) -> tuple[int, int]:
        """1. The producer id and epoch the session writes with."""
        ...

    async def join(
        self,
        calls: CoordinatorRequests,
        producer: tuple[int, int],
        partitions: Mapping[str, Sequence[int]],
        deadline: float,
    ) -> None:
        """2. Make ``partitions`` (per topic) ready for the session's first batches."""
        ...

    def written(self, producer: tuple[int, int], record_count: int, two_phase: bool) -> W:
        """4. The session's acknowledged records, as the sink's driver will see them
        (``two_phase``: the transaction takes part in two-phase commit, KIP-939)."""
        ...

    def abandon(
        self, client_kwargs: Mapping[str, Any], producer: tuple[int, int], record_count: int
    ) -> None:
        """End what a failed session leaves (after its requests settled)."""
        ...


@dataclass(frozen=True)
class InTransaction:
    """Writes inside a transaction of ``transactional_id`` (the exactly-once sink)."""

    transactional_id: str

    @property
    def transactional_batches(self) -> bool:
        return True

    def describe(self) -> str:
        return f"transaction {self.transactional_id!r}"

    async def init_producer_id(
        self, calls: CoordinatorRequests, deadline: float
    ) -> tuple[int, int]:
        return await calls.init_producer_id(deadline)

    async def join(
        self,
        calls: CoordinatorRequests,
        producer: tuple[int, int],
        partitions: Mapping[str, Sequence[int]],
        deadline: float,
    ) -> None:
        await calls.add_partitions(producer, partitions, deadline)

    def written(
        self, producer: tuple[int, int], record_count: int, two_phase: bool
    ) -> PreparedTransaction:
        return PreparedTransaction(
            self.transactional_id, producer[0], producer[1], record_count, two_phase
        )

    def abandon(
        self, client_kwargs: Mapping[str, Any], producer: tuple[int, int], record_count: int
    ) -> None:
        transaction_coordinator.abort_prepared(
            client_kwargs, self.written(producer, record_count, False)
        )


@dataclass(frozen=True)
class Idempotent:
    """Writes with an idempotent producer and no transaction (the at-least-once sink)."""

    @property
    def transactional_id(self) -> str | None:
        return None

    @property
    def transactional_batches(self) -> bool:
        return False

    def describe(self) -> str:
        return "the idempotent producer"

    async def init_producer_id(
        self, calls: CoordinatorRequests, deadline: float
    ) -> tuple[int, int]:
        return await calls.init_idempotent_producer_id(deadline)

    async def join(
        self,
        calls: CoordinatorRequests,
        producer: tuple[int, int],
        partitions: Mapping[str, Sequence[int]],
        deadline: float,
    ) -> None:
        return None

    def written(
        self, producer: tuple[int, int], record_count: int, two_phase: bool
    ) -> WrittenRecords:
        return WrittenRecords(producer[0], producer[1], record_count)

    def abandon(
        self, client_kwargs: Mapping[str, Any], producer: tuple[int, int], record_count: int
    ) -> None:
        return None
