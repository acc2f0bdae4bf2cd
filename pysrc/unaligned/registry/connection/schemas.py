"""Which schemas a query reads with: the reader's, resolved once when the query starts, and the
writers', fetched once per schema id and worker process.

:func:`resolve_reader` (driver, when the query starts: ``DataSource.schema()``) asks the
registry for the column's schema (``valueSchemaId``; else the subject: ``valueSubject``, or the
naming strategy's: ``<topic>-value`` with one subscribed topic, the record name, or
``<topic>-<record name>``, at ``valueSchemaVersion`` or its latest version) with every schema
it references, and :func:`subject_schemas` for the subject's other versions; ``valueSchema``
gives the reader schema inline instead (no look-up). A :class:`ResolvedSchema` is picklable:
they travel to the read tasks in the pickled reader, so records written with any of them never
ask the registry. :func:`writer_schema` fetches another id in a read task once per worker
process (:class:`~unaligned._util.process_memo.ProcessMemo`); a registry that cannot be reached
then fails the task once the registry timeout has passed, never a record.
"""

from __future__ import annotations

from dataclasses import dataclass

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import OptionError
from unaligned.registry.connection.client import RegisteredSchema, RegistryClient
from unaligned.registry.options import ColumnFormat, Format, RegistryConfig, SubjectNameStrategy


@dataclass(frozen=True)
class ResolvedSchema:
    """A registered schema and every schema it references, as (import name, schema), each
    after the ones it references: all it takes to read records offline."""

    schema: RegisteredSchema
    referenced: tuple[tuple[str, RegisteredSchema], ...] = ()

    @property
    def schema_id(self) -> int:
        return self.schema.schema_id

    def describe(self) -> str:
        where = ""
        if self.schema.subject is not None:
            where = f" (subject {self.schema.subject!r} version {self.schema.version})"
        return f"schema id {self.schema_id}{where}"


#: The schema id of a reader schema given inline (``valueSchema``): no record carries it.
INLINE_ID = -1


@dataclass(frozen=True)
class ColumnReading:
    """A column's format and the reader schema resolved for it when the query started; with
    several record types (``branches``: (struct field, its reading)), ``reader`` is the first
    type's and the column is a struct of one field per type."""

    format: ColumnFormat
    reader: ResolvedSchema
    known: tuple[ResolvedSchema, ...] = ()
    """The subject's other versions when the query started (no request for their ids)."""
    branches: tuple[tuple[str, ColumnReading], ...] = ()

    @property
    def name(self) -> str:
        return self.format.column

    def schemas(self) -> tuple[ResolvedSchema, ...]:
        return (self.reader, *self.known)

    def ids(self) -> frozenset[int]:
        return frozenset(s.schema_id for s in self.schemas())


_CLIENTS: ProcessMemo[RegistryConfig, RegistryClient] = ProcessMemo()
_WRITERS: ProcessMemo[tuple[RegistryConfig, int], ResolvedSchema] = ProcessMemo()
_SUBJECTS: ProcessMemo[tuple[RegistryConfig, int], tuple[str, ...]] = ProcessMemo()


def client_for(config: RegistryConfig) -> RegistryClient:
    """The process's client for ``config`` (its TLS context is built once)."""
    return _CLIENTS.get_or_compute(config, lambda: RegistryClient(config))


def default_subject(column: ColumnFormat, topics: tuple[str, ...] | None) -> str:
    """The subject a column's schema is read from: ``valueSubject``, else the naming
    strategy's (Confluent's): ``<topic>-value`` of the one subscribed topic, the record name,
    or ``<topic>-<record name>`` of the one subscribed topic."""
    if column.choice.subject is not None:
        return column.choice.subject
    return strategy_subject(column, column.record_name, topics)


def strategy_subject(column: ColumnFormat, entry: str, topics: tuple[str, ...] | None) -> str:
    """The subject of ``entry`` (a record name, or a subject the user named) for the column's
    naming strategy."""
    strategy, name = column.strategy, column.column
    if column.subjects and strategy is SubjectNameStrategy.TOPIC:
        return entry
    if strategy is SubjectNameStrategy.RECORD:
        return entry
    if topics is not None and len(topics) == 1:
        return strategy.subject(topics[0], entry, name)
    raise OptionError(
        f"option '{name}Format' needs the reader schema: set option '{name}Subject' (and "
        f"optionally '{name}SchemaVersion'), '{name}SchemaId', '{name}Schema', or "
        f"'{name}SubjectNameStrategy' record with '{name}RecordName'; the topic naming "
        "strategies apply only to a subscription to exactly one topic"
    )


def resolve_reader(
    client: RegistryClient, column: ColumnFormat, topics: tuple[str, ...] | None
) -> ResolvedSchema:
    """The reader schema of ``column`` (module docstring). Raises
    :class:`~unaligned.errors.SchemaRegistryError` or :class:`OptionError`."""
    choice = column.choice
    if column.inline_schema is not None:
        inline = RegisteredSchema(INLINE_ID, column.format.schema_type, column.inline_schema)
        return ResolvedSchema(inline)
    if choice.schema_id is not None:
        schema = client.schema_by_id(choice.schema_id)
    else:
        schema = client.subject_version(default_subject(column, topics), choice.version)
    return _resolved(client, schema, column)


def resolve_subject(client: RegistryClient, column: ColumnFormat, subject: str) -> ResolvedSchema:
    """The latest schema of ``subject`` for ``column``, with its references."""
    return _resolved(client, client.subject_version(subject, None), column)


def _resolved(
    client: RegistryClient, schema: RegisteredSchema, column: ColumnFormat
) -> ResolvedSchema:
    check_type(schema, column.format, column.column)
    resolved = ResolvedSchema(schema, client.referenced(schema))
    remember(client.config, resolved)
    return resolved


#: At most this many of a subject's latest versions travel to the read tasks.
MAX_KNOWN_VERSIONS = 50


def subject_schemas(
    client: RegistryClient, reader: ResolvedSchema, fmt: Format
) -> tuple[ResolvedSchema, ...]:
    """The other schemas registered under the reader's subject (its latest
    :data:`MAX_KNOWN_VERSIONS` versions): records written with them decode without asking the
    registry, even when it is down later in the run."""
    subject = reader.schema.subject
    if subject is None:
        return ()
    found = []
    for version in client.versions(subject)[-MAX_KNOWN_VERSIONS:]:
        if version == reader.schema.version:
            continue
        schema = client.subject_version(subject, version)
        if schema.schema_type == fmt.schema_type and schema.schema_id != reader.schema_id:
            found.append(ResolvedSchema(schema, client.referenced(schema)))
    return tuple(found)


def check_type(schema: RegisteredSchema, fmt: Format, column: str) -> None:
    if schema.schema_type != fmt.schema_type:
        raise OptionError(
            f"option '{column}Format' is {fmt.value}, but the registry's schema id "
            f"{schema.schema_id} is a {schema.schema_type} schema"
        )


def remember(config: RegistryConfig, resolved: ResolvedSchema) -> None:
    """Keep ``resolved`` as the schema of its id in this process (no request for it later)."""
    _WRITERS.put((config, resolved.schema_id), resolved)


def writer_schema(config: RegistryConfig, schema_id: int) -> ResolvedSchema:
    """The schema of ``schema_id``, asked of the registry once per process. Raises
    :class:`~unaligned.errors.SchemaNotFoundError` for an id the registry does not have."""

    def fetch() -> ResolvedSchema:
        client = client_for(config)
        schema = client.schema_by_id(schema_id)
        return ResolvedSchema(schema, client.referenced(schema))

    return _WRITERS.get_or_compute((config, schema_id), fetch)


def subjects_of(config: RegistryConfig, schema_id: int) -> tuple[str, ...]:
    """The subjects ``schema_id`` is registered under, asked once per process (which record
    type of a column with several a writer id belongs to)."""
    return _SUBJECTS.get_or_compute(
        (config, schema_id), lambda: tuple(client_for(config).subjects_of(schema_id))
    )
