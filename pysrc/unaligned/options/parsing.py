"""Option values as Spark writes them, parsed one way for the source, the sink and ``kafka.*``.

Every parser takes the option's name as the user should see it (Spark's spelling, with its
``kafka.`` prefix where it has one) and the raw string, and raises :class:`OptionError` in one
style: ``option 'NAME' must be <what it accepts>, got 'RAW'``.

One parser per kind of value, used by the source, the sink and the ``kafka.*`` settings we
map: :func:`parse_bytes` for every size (``4MB``, ``4MiB``, ``4m``, ``64KB``, ``1048576``;
``KB``/``MB``/``GB`` are powers of 2 as in Spark's byte strings, so ``4MB`` = ``4MiB`` =
4,194,304 bytes), :func:`parse_duration_ms` for every duration (``500``, ``500ms``, ``30s``,
``15m``, ``1h``; a bare number is milliseconds).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from unaligned.errors import OptionError

#: Options passed through to Kafka's clients start with this (Spark's convention).
KAFKA_PREFIX = "kafka."

_TIME_UNITS_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
# Powers of 2 as in Spark's byte strings (``JavaUtils.byteStringAsBytes``): MB = MiB = 2**20.
_BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    **{
        f"{letter}{suffix}": 1024**power
        for power, letter in enumerate("kmgt", 1)
        for suffix in ("", "b", "ib")
    },
}
_SIZE_EXAMPLES = "a size like 1048576, 64KB, 4MB, 4MiB or 4m (KB, MB, GB: powers of 2)"


def invalid(name: str, accepts: str, raw: str) -> OptionError:
    """The error for option ``name`` whose value ``raw`` is not ``accepts``."""
    return OptionError(f"option '{name}' must be {accepts}, got {raw!r}")


def parse_bool(name: str, raw: str) -> bool:
    """``true`` or ``false``, any case."""
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise invalid(name, "'true' or 'false'", raw)
    return lowered == "true"


def parse_int(name: str, raw: str, minimum: int) -> int:
    """A whole number of at least ``minimum``."""
    try:
        value = int(raw.strip())
    except ValueError:
        raise invalid(name, "a whole number", raw) from None
    if value < minimum:
        raise invalid(name, f"a whole number >= {minimum}", raw)
    return value


def parse_positive(name: str, raw: str) -> int:
    """A whole number >= 1."""
    return parse_int(name, raw, 1)


def parse_non_negative(name: str, raw: str) -> int:
    """A whole number >= 0."""
    return parse_int(name, raw, 0)


def parse_duration_ms(name: str, raw: str, minimum: int = 0) -> int:
    """Spark's time strings (``Utils.timeStringAsMs``): ``500``, ``500ms``, ``10s``, ``15m``, ...
    A bare number is milliseconds. At least ``minimum`` ms."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]+)?\s*", raw.lower())
    if match is None or (match.group(2) is not None and match.group(2) not in _TIME_UNITS_MS):
        raise invalid(name, "a duration like 500ms, 30s, 15m or 1h", raw)
    value = int(int(match.group(1)) * _TIME_UNITS_MS[match.group(2) or "ms"])
    if value < minimum:
        raise invalid(name, f"a duration of at least {minimum} ms", raw)
    return value


def parse_bytes(name: str, raw: str, minimum: int = 0) -> int:
    """A size: ``1048576``, ``64KB``, ``4MB``, ``4MiB``, ``4m``, ``1g`` (any case; ``KB``/``MB``/
    ``GB``/``TB`` and ``KiB``/``MiB``/... are the same powers of 2). At least ``minimum``."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or match.group(2) not in _BYTE_UNITS:
        raise invalid(name, _SIZE_EXAMPLES, raw)
    value = int(match.group(1)) * _BYTE_UNITS[match.group(2)]
    if value < minimum:
        raise invalid(name, f"a size of at least {minimum} bytes", raw)
    return value


def parse_choice(name: str, raw: str, allowed: Collection[str]) -> str:
    """One of ``allowed`` (lower case), matched case-insensitively."""
    value = raw.strip().lower()
    if value not in allowed:
        raise invalid(name, "one of " + ", ".join(repr(a) for a in allowed), raw)
    return value


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options of ``options`` (keys lower-cased already), without the prefix."""
    return {k[len(KAFKA_PREFIX) :]: v for k, v in options.items() if k.startswith(KAFKA_PREFIX)}
