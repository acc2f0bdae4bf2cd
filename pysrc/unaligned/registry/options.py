"""The Schema Registry options of the source and the sink, parsed into frozen dataclasses.

Keys arrive lower-cased. The registry's own settings carry Confluent's client names under
``schema.registry.`` (``schema.registry.url``, ``schema.registry.basic.auth.user.info``,
``schema.registry.bearer.auth.token``, ``schema.registry.ssl.ca.location``, ...); a column's
format and schema are ``valueFormat`` / ``keyFormat``, ``valueSubject``, ``valueSchemaVersion``
and ``valueSchemaId`` (``key...`` alike); ``mode`` is ``FAILFAST`` or ``PERMISSIVE`` as for
Spark's ``from_avro``; the sink adds ``valueSubjectNameStrategy`` and ``autoRegisterSchemas``.
:func:`parse_formats` takes the keys it knows out of the options and returns the rest for the
caller's own checks. Nothing here touches the network: the reader schema is resolved when the
query starts (:mod:`unaligned.registry.resolution`). What each option means: README.md,
"Schema Registry formats".
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from unaligned.errors import OptionError
from unaligned.options.parsing import parse_bool, parse_choice, parse_positive
from unaligned.registry.connection.registry_settings import RegistryConfig, parse_registry
from unaligned.registry.option_specs import COLUMN_SUFFIXES, REGISTRY_PREFIX, SOURCE_ONLY_SUFFIXES

__all__ = ["REGISTRY_PREFIX", "RegistryConfig", "parse_formats"]


class Format(enum.Enum):
    """How a column's bytes are framed and encoded (option ``valueFormat`` / ``keyFormat``)."""

    BINARY = "binary"
    AVRO = "avro-confluent"
    JSON_SCHEMA = "json-schema-confluent"
    PROTOBUF = "protobuf-confluent"

    @property
    def schema_type(self) -> str:
        """The registry's ``schemaType`` of this format."""
        return {"avro-confluent": "AVRO", "json-schema-confluent": "JSON"}.get(
            self.value, "PROTOBUF"
        )


class DecodeMode(enum.Enum):
    """What a record that does not decode does (option ``mode``, as Spark's ``from_avro``)."""

    FAILFAST = "failfast"
    PERMISSIVE = "permissive"


class SubjectNameStrategy(enum.Enum):
    """Which subject the sink registers and looks its schema up under (Confluent's names:
    ``TopicNameStrategy``, ``RecordNameStrategy``, ``TopicRecordNameStrategy``)."""

    TOPIC = "topic"
    RECORD = "record"
    TOPIC_RECORD = "topic-record"

    def subject(self, topic: str, record_name: str, column: str) -> str:
        if self is SubjectNameStrategy.TOPIC:
            return f"{topic}-{column}"
        if self is SubjectNameStrategy.RECORD:
            return record_name
        return f"{topic}-{record_name}"


@dataclass(frozen=True)
class SchemaChoice:
    """Which registered schema a column is read or written with: ``schema_id``, else
    ``subject`` (``None``: the naming strategy's) at ``version`` (``None``: the latest when
    the query starts). The sink derives the schema from the column's type unless an id or a
    version (``latest`` too: ``pinned``) is given."""

    subject: str | None = None
    version: int | None = None
    schema_id: int | None = None
    pinned: bool = False
    """An id or a version was given (the sink writes with that registered schema)."""


@dataclass(frozen=True)
class ColumnFormat:
    """The format of the ``key`` or ``value`` column and the schema it is read or written with."""

    column: str  # "key" or "value"
    format: Format
    choice: SchemaChoice
    strategy: SubjectNameStrategy = SubjectNameStrategy.TOPIC
    record_name: str = "topLevelRecord"
    """The sink's name for a schema it derives (Avro record, Protobuf message, JSON Schema
    title); Spark's ``to_avro`` calls it ``topLevelRecord``. The source's record names for
    the ``record`` and ``topic-record`` strategies (comma-separated: several record types)."""
    message_name: str | None = None
    """Protobuf: the message read or written (``valueMessageName``; ``None``: the first)."""
    upcast_unsigned: bool = False
    """Protobuf: uint32 as bigint, uint64 as decimal(20,0) (``upcastUnsignedInts``)."""
    inline_schema: str | None = None
    """The source's reader schema given as text (``valueSchema``), no registry look-up."""
    subjects: tuple[tuple[str, str], ...] = ()
    """The source's (field, subject) of each record type when several are read (one struct
    field per type: ``valueSubject`` a comma-separated list, or several record names)."""


@dataclass(frozen=True)
class RecordFormats:
    """The formats of a query's key and value columns (``None``: binary, as without a registry)."""

    registry: RegistryConfig
    value: ColumnFormat | None
    key: ColumnFormat | None
    mode: DecodeMode = DecodeMode.FAILFAST
    auto_register: bool = True

    @property
    def columns(self) -> tuple[ColumnFormat, ...]:
        return tuple(c for c in (self.key, self.value) if c is not None)


_COLUMN_OPTIONS = tuple(COLUMN_SUFFIXES)
_SOURCE_ONLY = SOURCE_ONLY_SUFFIXES
_SPELLED = COLUMN_SUFFIXES


def is_format_option(key: str, *, sink: bool) -> bool:
    """Whether this module reads the (lower-cased) option ``key``."""
    if key.startswith(REGISTRY_PREFIX) or key == "mode":
        return True
    if key == ("autoregisterschemas" if sink else "upcastunsignedints"):
        return True
    for column in ("key", "value"):
        if key.startswith(column) and key[len(column) :] in _COLUMN_OPTIONS:
            return not sink or key[len(column) :] not in _SOURCE_ONLY
    return False


def parse_formats(options: Mapping[str, str], *, sink: bool) -> RecordFormats | None:
    """The formats the (lower-cased) ``options`` set; ``None`` when both columns stay binary
    and no other format option is given. Raises :class:`OptionError` naming the option."""
    given = {k: v for k, v in options.items() if is_format_option(k, sink=sink)}
    columns = {name: _column(given, name, sink) for name in ("key", "value")}
    if all(c is None for c in columns.values()):
        if given:
            named = ", ".join(sorted(given))
            raise OptionError(
                f"option(s) {named} set but neither 'valueFormat' nor 'keyFormat' names a "
                "Schema Registry format (avro-confluent, json-schema-confluent, "
                "protobuf-confluent)"
            )
        return None
    mode = DecodeMode(
        parse_choice("mode", given.get("mode", "FAILFAST"), [m.value for m in DecodeMode])
    )
    if sink and "mode" in given:
        raise OptionError("option 'mode' applies to the source (how records that fail to decode)")
    auto = parse_bool("autoRegisterSchemas", given.get("autoregisterschemas", "true"))
    upcast = parse_bool("upcastUnsignedInts", given.get("upcastunsignedints", "false"))
    if upcast:
        columns = {k: c and replace(c, upcast_unsigned=True) for k, c in columns.items()}
    return RecordFormats(
        registry=parse_registry(given),
        value=columns["value"],
        key=columns["key"],
        mode=mode,
        auto_register=auto,
    )


def _column(given: Mapping[str, str], column: str, sink: bool) -> ColumnFormat | None:
    raw = given.get(f"{column}format", "binary")
    fmt = Format(parse_choice(f"{column}Format", raw, [f.value for f in Format]))
    if fmt is Format.BINARY:
        extra = [k for k in given if k.startswith(column) and k != f"{column}format"]
        if extra:
            spelled = column + _SPELLED.get(extra[0][len(column) :], extra[0][len(column) :])
            raise OptionError(
                f"option '{spelled}' needs option '{column}Format' set to a registry format"
            )
        return None
    subject = given.get(f"{column}subject")
    if subject is not None and not subject.strip():
        raise OptionError(f"option '{column}Subject' is empty")
    version_raw = given.get(f"{column}schemaversion")
    version = None
    if version_raw is not None and version_raw.strip().lower() != "latest":
        version = parse_positive(f"{column}SchemaVersion", version_raw)
    id_raw = given.get(f"{column}schemaid")
    schema_id = None if id_raw is None else parse_positive(f"{column}SchemaId", id_raw)
    inline = given.get(f"{column}schema")
    if schema_id is not None and (subject is not None or version_raw is not None):
        raise OptionError(
            f"option '{column}SchemaId' names the schema itself: leave out '{column}Subject' "
            f"and '{column}SchemaVersion'"
        )
    if inline is not None and (schema_id is not None or version_raw is not None):
        raise OptionError(
            f"option '{column}Schema' gives the reader schema itself: leave out "
            f"'{column}SchemaId' and '{column}SchemaVersion'"
        )
    strategy = SubjectNameStrategy(
        parse_choice(
            f"{column}SubjectNameStrategy",
            given.get(f"{column}subjectnamestrategy", "topic"),
            [s.value for s in SubjectNameStrategy],
        )
    )
    names_raw = given.get(f"{column}recordname")
    names = _named_list(f"{column}RecordName", names_raw or "topLevelRecord", sink)
    subjects: tuple[tuple[str, str], ...] = ()
    if not sink and subject is not None and "," in subject:
        subjects = _named_list(f"{column}Subject", subject, sink=False)
        strategy = SubjectNameStrategy.TOPIC  # the subjects are named: no strategy applies
    elif not sink and strategy is not SubjectNameStrategy.TOPIC and subject is None:
        if names_raw is None:
            raise OptionError(
                f"option '{column}SubjectNameStrategy' {strategy.value} needs option "
                f"'{column}RecordName' (the record's full name, several comma-separated)"
            )
        subjects = names if len(names) > 1 else ()
    if subjects and (version_raw is not None or schema_id is not None or inline is not None):
        raise OptionError(
            f"several record types in '{column}' are read at their latest versions: leave out "
            f"'{column}SchemaVersion', '{column}SchemaId' and '{column}Schema'"
        )
    choice = SchemaChoice(
        subject.strip() if subject and not subjects else None,
        version,
        schema_id,
        pinned=schema_id is not None or version_raw is not None,
    )
    if (
        sink
        and version_raw is not None
        and choice.subject is None
        and strategy is not (SubjectNameStrategy.TOPIC)
    ):
        raise OptionError(
            f"option '{column}SchemaVersion' with a {strategy.value} naming strategy needs "
            f"option '{column}Subject'"
        )
    message = given.get(f"{column}messagename")
    if message is not None and fmt is not Format.PROTOBUF:
        raise OptionError(f"option '{column}MessageName' applies to protobuf-confluent")
    if (
        not sink
        and message is None
        and fmt is Format.PROTOBUF
        and strategy is not SubjectNameStrategy.TOPIC
        and names_raw is not None
        and not subjects
    ):  # the record name is the message's (the file may hold several)
        message = names[0][1]
    return ColumnFormat(
        column,
        fmt,
        choice,
        strategy,
        names[0][1],
        message_name=message.strip() if message else None,
        inline_schema=inline,
        subjects=subjects,
    )


_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"


def _named_list(option: str, raw: str, sink: bool) -> tuple[tuple[str, str], ...]:
    """``a.B`` or ``field=a.B`` entries, comma-separated (one for the sink), as (field name,
    value); the field name defaults to the value's last ``.``/``-`` part."""
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    if not entries or (sink and len(entries) > 1):
        raise OptionError(f"option '{option}' must be one name like 'shop.Customer', got {raw!r}")
    found: dict[str, str] = {}
    for entry in entries:
        field_name, _, value = entry.rpartition("=")
        value = value.strip()
        field_name = field_name.strip() or re.split(r"[.\-]", value)[-1]
        record_option = option.endswith("RecordName")
        if (record_option and not re.fullmatch(_NAME, value)) or not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*", field_name
        ):
            raise OptionError(
                f"option '{option}' must be names like 'shop.Customer' or "
                f"'customer=shop.Customer' (comma-separated), got {entry!r}"
            )
        if field_name in found:
            raise OptionError(
                f"option '{option}' names two record types {field_name!r}: name their fields, "
                f"e.g. '{field_name}1={found[field_name]},{field_name}2={value}'"
            )
        found[field_name] = value
    return tuple(found.items())
