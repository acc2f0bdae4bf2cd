"""The Schema Registry options, declared: one :class:`~unaligned.options.declaration.OptionSpec`
each, for the source (:data:`REGISTRY_SOURCE_SPECS`) and the sink (:data:`REGISTRY_SINK_SPECS`).

A column's options exist for ``value`` and ``key`` alike (``valueFormat`` / ``keyFormat``, ...);
the registry's own settings carry Confluent's client names under ``schema.registry.``. The
parsing is :mod:`unaligned.registry.options`, which reads every name and default from here;
the reference pages of docs/reference/ are generated from the same declarations.
"""

from __future__ import annotations

from typing import Any

from unaligned.options.declaration import OptionSpec

#: Confluent's client settings pass under this prefix (``schema.registry.url``, ...).
REGISTRY_PREFIX = "schema.registry."

_FORMATS = "`binary`, `avro-confluent`, `json-schema-confluent` or `protobuf-confluent`"

#: A column's options: suffix after ``value``/``key``, default, meaning, which side reads it.
_COLUMN: tuple[tuple[str, str | None, str, str], ...] = (
    ("Format", "binary", f"the {{column}}'s format: {_FORMATS}", "both"),
    ("SchemaId", None, "read (write) the {column} with this registered schema", "both"),
    (
        "Subject",
        None,
        "the subject of the reader (writer) schema; default from the naming strategy "
        "(`<topic>-{column}`: the source needs one unless it subscribes to exactly one topic); "
        "on the source a comma list reads several record types, one struct field each",
        "both",
    ),
    (
        "SchemaVersion",
        None,
        "the subject's version (default: its latest when the query starts); on the sink a "
        "version, or `latest`, writes with that registered schema",
        "both",
    ),
    (
        "SubjectNameStrategy",
        "topic",
        "`topic` (`<topic>-{column}`), `record` (the record's full name) or `topic-record`; "
        "on the source with `record`/`topic-record`, the `{column}RecordName` entries are the "
        "record types read",
        "both",
    ),
    (
        "RecordName",
        "topLevelRecord",
        "the name of a schema the sink derives (Avro record, Protobuf message, JSON Schema "
        "title), e.g. `shop.Payment`; on the source, the record type(s) read (comma-separated)",
        "both",
    ),
    (
        "MessageName",
        None,
        "Protobuf: the message of the schema's file to read or write (Spark's "
        "`from_protobuf(messageName)`; default: the record's message indexes, else the first)",
        "both",
    ),
    (
        "Schema",
        None,
        "a reader schema given inline (Spark's `avroSchema`): records are resolved against it, "
        "no subject is looked up",
        "source",
    ),
)
#: Column option suffix (lower case) -> its spelling, and those only the sink reads.
COLUMN_SUFFIXES = {suffix.lower(): suffix for suffix, _, _, _ in _COLUMN}
SINK_ONLY_SUFFIXES = tuple(suffix.lower() for suffix, _, _, side in _COLUMN if side == "sink")
SOURCE_ONLY_SUFFIXES = tuple(suffix.lower() for suffix, _, _, side in _COLUMN if side == "source")

#: The registry's own settings: name after the prefix, default, meaning.
_SETTINGS: tuple[tuple[str, str | None, str], ...] = (
    ("url", None, "the registry's API base; several, comma-separated, are tried in turn"),
    ("basic.auth.user.info", None, "`user:password`; never in a message"),
    ("basic.auth.credentials.source", None, "`user_info` or `url` (`https://user:pw@host`)"),
    ("bearer.auth.token", None, "a static bearer token"),
    (
        "bearer.auth.credentials.source",
        None,
        "`static_token`, or `OAUTHBEARER`: OAuth client credentials from the issuer below",
    ),
    ("bearer.auth.issuer.endpoint.url", None, "OAuth: the token endpoint"),
    ("bearer.auth.client.id", None, "OAuth: the client id"),
    ("bearer.auth.client.secret", None, "OAuth: the client secret; never in a message"),
    ("bearer.auth.scope", None, "OAuth: the scope asked for"),
    ("bearer.auth.logical.cluster", None, "Confluent Cloud: the registry's logical cluster"),
    ("bearer.auth.identity.pool.id", None, "Confluent Cloud: the identity pool"),
    ("ssl.ca.location", None, "a PEM file of the authorities to trust (default: the system's)"),
    ("ssl.certificate.location", None, "the client certificate (PEM)"),
    ("ssl.key.location", None, "the client key (PEM)"),
    ("ssl.key.password", None, "the client key's password"),
    (
        "request.timeout.ms",
        "10000",
        "per request, and how long a registry that cannot be reached is retried (every URL in "
        "turn) before the task fails naming it",
    ),
)
#: Setting name after the prefix -> the option's full name.
REGISTRY_SETTINGS = {name: REGISTRY_PREFIX + name for name, _, _ in _SETTINGS}


def _specs(sink: bool) -> tuple[OptionSpec[Any], ...]:
    side = "sink" if sink else "source"
    specs: list[OptionSpec[Any]] = []
    for suffix, default, meaning, reads in _COLUMN:
        if reads in ("both", side):
            for column in ("value", "key"):
                specs.append(
                    OptionSpec(column + suffix, meaning.format(column=column), None, default)
                )
    specs += [
        OptionSpec(REGISTRY_PREFIX + name, meaning, None, default)
        for name, default, meaning in _SETTINGS
    ]
    if sink:
        specs.append(
            OptionSpec(
                "autoRegisterSchemas",
                "register a schema the sink derives (the registry returns the existing id); "
                "`false`: it must be registered under the subject already",
                None,
                "true",
            )
        )
    else:
        specs.append(
            OptionSpec(
                "upcastUnsignedInts",
                "Protobuf: read `uint32` as `bigint` and `uint64` as `decimal(20,0)` (Spark's "
                "`upcast.unsigned.ints`); default: as Spark reads them, `int` and `bigint`",
                None,
                "false",
            )
        )
        specs.append(
            OptionSpec(
                "mode",
                "`FAILFAST`: a record that does not decode stops the query, naming it; "
                "`PERMISSIVE`: its value is null, with `valueError` and `valueRaw` set",
                None,
                "FAILFAST",
            )
        )
    return tuple(specs)


REGISTRY_SOURCE_SPECS = _specs(sink=False)
REGISTRY_SINK_SPECS = _specs(sink=True)
