"""Test and demo support: :class:`EmbeddedKafka`, a real single-node KRaft broker.

:mod:`.jvm` is the only module that touches the JVM (the Maven build of ``jvm-shim`` and the
broker process); ``python -m unaligned.testing.jvm build`` builds the shim.
"""

from unaligned.testing.embedded_kafka import EmbeddedKafka

__all__ = ["EmbeddedKafka"]
