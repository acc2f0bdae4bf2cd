"""unaligned.testing.cluster_roles without a cluster: where Kafka places a coordinator's key."""

from __future__ import annotations

from unaligned.testing.cluster_roles import coordinator_partition


def test_the_partition_is_javas_string_hash_code_made_non_negative_modulo_the_count() -> None:
    assert coordinator_partition("hello", 1_000_000_007) == 99162322  # "hello".hashCode()
    assert coordinator_partition("hello", 4) == 99162322 % 4
    assert coordinator_partition("é", 1000) == 233  # one UTF-16 unit
    assert coordinator_partition("\U0001f600", 10_000_000) == 0xD83D * 31 + 0xDE00  # a pair


def test_integer_min_value_maps_to_partition_zero_as_kafkas_utils_abs_does() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Utils.abs(n) is n & 0x7fffffff.
    assert coordinator_partition("polygenelubricants", 50) == 0
