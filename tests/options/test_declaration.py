"""OptionSpec and OptionSet: a declared default is parsed like a given value, a prefix covers
its keys, a name declared twice is refused, and unknown-option messages collapse prefixes."""

from __future__ import annotations

import pytest

from unaligned.errors import OptionError
from unaligned.options.declaration import OptionSet, OptionSpec
from unaligned.options.parsing import parse_bytes, parse_positive

SIZE = OptionSpec("maxSize", "a size", parse_bytes, "4MB")
COUNT = OptionSpec("count", "a count", parse_positive)
KAFKA = OptionSpec("kafka.*", "passed through")
RACK = OptionSpec("kafka.client.rack", "the rack")


def test_the_default_is_parsed_as_a_given_value_would_be() -> None:
    assert SIZE.value({}) == 4 * 1024 * 1024
    assert SIZE.value({"maxsize": "64KB"}) == 64 * 1024
    assert COUNT.value_or_none({}) is None
    with pytest.raises(OptionError, match="option 'count'"):
        COUNT.value({"count": "0"})


def test_exact_names_win_over_prefixes() -> None:
    options = OptionSet("source", (SIZE, KAFKA, RACK))
    assert options.find("kafka.client.rack") is RACK
    assert options.find("kafka.acks") is KAFKA
    assert options.find("maxsize") is SIZE and not options.knows("maxsizes")


def test_a_name_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        OptionSet("sink", (SIZE, OptionSpec("MaxSize", "again")))


def test_messages_show_a_prefix_for_the_names_under_it() -> None:
    options = OptionSet("source", (SIZE, KAFKA, RACK, OptionSpec("schema.registry.url", "u")))
    assert options.names(collapse=("kafka.", "schema.registry.")) == (
        "kafka.*",
        "maxSize",
        "schema.registry.*",
    )
    assert SIZE.shown_default == "`4MB`" and COUNT.shown_default == ""
