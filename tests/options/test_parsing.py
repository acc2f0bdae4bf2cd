"""One parser per kind of option value: sizes and durations read the same everywhere."""

from __future__ import annotations

import pytest

from unaligned.errors import OptionError
from unaligned.options.parsing import parse_bytes, parse_duration_ms

MIB = 1024 * 1024


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1048576", MIB),
        ("4MB", 4 * MIB),
        ("4MiB", 4 * MIB),
        ("4m", 4 * MIB),
        ("4 mb", 4 * MIB),
        ("64KB", 64 * 1024),
        ("64KiB", 64 * 1024),
        ("512k", 512 * 1024),
        ("1g", 1024 * MIB),
        ("2GiB", 2 * 1024 * MIB),
        ("10b", 10),
        ("0", 0),
    ],
)
def test_sizes_are_powers_of_two_in_every_spelling(raw: str, expected: int) -> None:
    assert parse_bytes("someSize", raw) == expected


@pytest.mark.parametrize("raw", ["lots", "4 MBs", "1.5MB", "-1", "MB", "4XB", ""])
def test_malformed_size_names_the_option_and_the_accepted_forms(raw: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_bytes("someSize", raw)
    assert str(raised.value) == (
        "option 'someSize' must be a size like 1048576, 64KB, 4MB, 4MiB or 4m "
        f"(KB, MB, GB: powers of 2), got {raw!r}"
    )


def test_size_below_its_minimum_is_refused() -> None:
    with pytest.raises(OptionError, match="option 'x' must be a size of at least 1 bytes"):
        parse_bytes("x", "0", minimum=1)


@pytest.mark.parametrize(
    "raw, expected",
    [("500", 500), ("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("1h", 3_600_000)],
)
def test_durations_bare_numbers_are_milliseconds(raw: str, expected: int) -> None:
    assert parse_duration_ms("d", raw) == expected


def test_malformed_or_too_short_duration_is_refused() -> None:
    with pytest.raises(OptionError, match="option 'd' must be a duration like 500ms"):
        parse_duration_ms("d", "soon")
    with pytest.raises(OptionError, match="option 'd' must be a duration of at least 1 ms"):
        parse_duration_ms("d", "0s", minimum=1)
