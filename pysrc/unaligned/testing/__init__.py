"""Test and demo support: :class:`EmbeddedKafka`, a real single-node KRaft broker.

Only two modules touch the JVM: :mod:`.shim_build` (the Maven build of ``jvm-shim``;
``python -m unaligned.testing.shim_build build`` builds it) and :mod:`.broker_process` (the
broker's ``java`` process and its stdin/stdout protocol). :mod:`.topic_records` produces to and
reads from the broker's topics with kafka-python clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from unaligned.testing.embedded_kafka import EmbeddedKafka

__all__ = ["EmbeddedKafka"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so ``python -m unaligned.testing.shim_build`` does not import the
    # module it runs twice (embedded_kafka imports shim_build).
    if name == "EmbeddedKafka":
        from unaligned.testing.embedded_kafka import EmbeddedKafka

        return EmbeddedKafka
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
