"""One declaration per option: :class:`OptionSpec`, and :class:`OptionSet`, the options one side
(the source or the sink) knows.

A spec says everything about an option in one place: its name in Spark's spelling (keys are
case-insensitive; messages and the docs use this spelling), its default as a user would write
it (parsed by the same parser as a given value, so the value used and the value documented
cannot differ), the parser (one per kind of value, :mod:`unaligned.options.parsing`), what it sets,
which sink target reads it, and its meaning in one line. The options modules
(:mod:`unaligned.source.options`, :mod:`unaligned.sink.options`,
:mod:`unaligned.sink.kafka_target`, :mod:`unaligned.registry.options`) declare theirs and read
values through them; an :class:`OptionSet` answers "is this key known?" for the unknown-option
errors and lists the names those errors show; ``unaligned.manual`` writes the reference tables
of ``docs/reference/`` from the same sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Parser = Callable[[str, str], T]
"""``parser(name, raw)``: the value, or :class:`~unaligned.errors.OptionError` naming ``name``."""


def text(name: str, raw: str) -> str:
    """The raw value as given (for options whose value any string is)."""
    return raw


@dataclass(frozen=True)
class OptionSpec(Generic[T]):
    """One option. ``parse`` is ``None`` for options whose value the declaring module reads by
    hand (a JSON document, an option of a group read together); ``default`` is the raw default
    (``None``: the option is unset unless given); ``default_text`` is what the reference shows
    when the default is not a value (``the cores of the host``, ``<checkpoint>/...``);
    ``sets`` names what the option sets (a field, a client setting); ``only_for`` is the sink
    target (``Kafka``, ``file``, ``Iceberg``, ``Delta``) or targets that read it, others refuse
    it (:attr:`targets`); a ``name`` ending in ``*`` is
    a prefix (``kafka.*``): every key starting with it is known."""

    name: str
    meaning: str
    parse: Parser[T] | None = None
    default: str | None = None
    default_text: str | None = None
    sets: str | None = None
    only_for: str | tuple[str, ...] | None = None

    @property
    def targets(self) -> tuple[str, ...]:
        """The sink targets that read it (empty: every target)."""
        if self.only_for is None:
            return ()
        return (self.only_for,) if isinstance(self.only_for, str) else self.only_for

    @property
    def key(self) -> str:
        """The lower-cased key Spark hands over (without the ``*`` of a prefix)."""
        return self.name.rstrip("*").lower()

    @property
    def is_prefix(self) -> bool:
        return self.name.endswith("*")

    @property
    def shown_default(self) -> str:
        """The default as the reference shows it."""
        if self.default_text is not None:
            return self.default_text
        return "" if self.default is None else f"`{self.default}`"

    def matches(self, key: str) -> bool:
        """Whether the lower-cased ``key`` is this option (or under this prefix)."""
        return key.startswith(self.key) if self.is_prefix else key == self.key

    def value(self, options: Mapping[str, str]) -> T:
        """The parsed value in the lower-cased ``options``, else the parsed default."""
        raw = options.get(self.key, self.default)
        if raw is None:
            raise LookupError(f"option '{self.name}' has no default")
        return self._parser()(self.name, raw)

    def value_or_none(self, options: Mapping[str, str]) -> T | None:
        """The parsed value, the parsed default, or ``None`` when neither exists."""
        raw = options.get(self.key, self.default)
        return None if raw is None else self._parser()(self.name, raw)

    def _parser(self) -> Parser[T]:
        if self.parse is None:
            raise TypeError(f"option '{self.name}' is read by its module, it has no parser")
        return self.parse


@dataclass(frozen=True)
class OptionSet:
    """The options one side knows, in the order the reference lists them."""

    side: str  # "source" or "sink", in messages
    specs: tuple[OptionSpec[Any], ...]

    def __post_init__(self) -> None:
        names = [s.name.lower() for s in self.specs]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"options declared twice for the {self.side}: {doubled}")

    def __iter__(self) -> Iterator[OptionSpec[Any]]:
        return iter(self.specs)

    def find(self, key: str) -> OptionSpec[Any] | None:
        """The spec of the lower-cased ``key``: an exact name first, else a prefix."""
        for spec in self.specs:
            if not spec.is_prefix and spec.key == key:
                return spec
        for spec in self.specs:
            if spec.is_prefix and spec.matches(key):
                return spec
        return None

    def knows(self, key: str) -> bool:
        return self.find(key) is not None

    def names(self, collapse: Iterable[str] = ()) -> tuple[str, ...]:
        """Every name, sorted case-insensitively, for an unknown-option message; names under a
        prefix of ``collapse`` (``kafka.``) are shown as that prefix (``kafka.*``)."""
        shown = set()
        for spec in self.specs:
            under = [p for p in collapse if spec.key.startswith(p.lower())]
            shown.add(f"{under[0]}*" if under and not spec.is_prefix else spec.name)
        return tuple(sorted(shown, key=str.lower))

    def with_specs(self, *more: Iterable[OptionSpec[Any]]) -> OptionSet:
        """This set followed by ``more`` (a module's options joined with another's)."""
        return OptionSet(self.side, self.specs + tuple(s for group in more for s in group))
