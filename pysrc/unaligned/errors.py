"""Every error the package raises on purpose.

All of them derive from :class:`UnalignedError`, so a caller can catch the package's errors
without catching Spark's or Kafka's. Each error's message names the thing that is wrong: the
option, the topic-partition, the file, the barrier, the bootstrap servers.
"""

from __future__ import annotations


class UnalignedError(Exception):
    """Base class of every error raised by ``unaligned``."""


# --- configuration -------------------------------------------------------------------------


class OptionError(UnalignedError, ValueError):
    """An option is unknown, malformed, missing, or contradicts another option."""


class OffsetFormatError(OptionError):
    """An offsets JSON (``startingOffsets``, ``assign``, a checkpointed offset) is malformed."""


# --- Schema Registry -------------------------------------------------------------------------


class SchemaRegistryError(UnalignedError, ConnectionError):
    """The Schema Registry could not be reached, refused a request or has no such schema. The
    message names the registry by its URL without credentials, never a password or token."""


class SchemaNotFoundError(SchemaRegistryError, LookupError):
    """The registry answered that it has no such schema id, subject or version."""


class RecordFormatError(UnalignedError, ValueError):
    """A record's key or value is not in the format the query reads (no Confluent framing, a
    schema id the reader cannot resolve, bytes that do not decode): with ``mode`` FAILFAST the
    query stops, naming the topic-partition and offset; PERMISSIVE sets the row's error column."""


class MissingExtraError(UnalignedError, ImportError):
    """A format needs an optional dependency that is not installed; the message names the
    ``pip install 'unaligned[...]'`` that brings it."""


# --- Kafka -----------------------------------------------------------------------------------


class KafkaUnavailableError(UnalignedError, ConnectionError):
    """The Kafka cluster could not be reached within the configured time."""


class KafkaAuthenticationError(UnalignedError, PermissionError):
    """A broker refused the client's login (a wrong password, an expired or rejected token, a
    refused certificate); the message names the mechanism, the servers and the broker's
    reason, never a secret. Never asked again: another attempt would be refused the same way."""


class KafkaAuthorizationError(UnalignedError, PermissionError):
    """The cluster refused the client's principal an operation on a resource: an ACL is
    missing. The message names the request the broker refused, the resource (type and name),
    the operation, and the ``kafka-acls`` command that grants it
    (:mod:`unaligned.kafka.clients.authorization`). Never asked again: the broker would refuse
    it the same way until the ACL is added."""


class OAuthTokenError(UnalignedError):
    """No OAUTHBEARER token could be had: the token endpoint refused the client or could not be
    reached, or the token file could not be read; the message names the endpoint and the client
    id, never the secret."""


class KafkaClientVersionError(UnalignedError, ImportError):
    """The installed kafka-python is not the one whose private names the package uses
    (``unaligned.kafka.clients.client_internals.PINNED_KAFKA_PYTHON``); raised on import."""


class TopicNotFoundError(UnalignedError, LookupError):
    """A topic named by ``subscribe`` or ``assign`` (or a sink's ``topic``) does not exist."""


class DataLossError(UnalignedError):
    """Offsets the query still has to read are gone (retention, deleted records or topic).

    Raised only with ``failOnDataLoss=true`` (the default); with ``false`` the source logs a
    warning and continues from the earliest available offset.
    """


class RecordDecodeError(UnalignedError):
    """A fetched Kafka record batch cannot be decoded (corrupt, failed CRC, or compressed with
    a codec whose Python library is missing); the message names the topic-partition and offset."""


class LegacyRecordFormatError(UnalignedError):
    """A fetched batch is in message format v0/v1, which the columnar decoder does not read;
    the fetcher hook hands such a fetch to kafka-python's own decoder instead (never raised
    to the user)."""


# --- the two-phase-commit sink ------------------------------------------------------------------


class SinkConfigurationError(OptionError):
    """The sink cannot give exactly-once with the options or the broker settings it was given."""


class SchemaMismatchError(UnalignedError, TypeError):
    """The sink's input columns do not have the names or types the sink needs."""


class TransactionCommitError(UnalignedError):
    """The broker refused to commit a prepared transaction (fenced, aborted, or unknown).

    Never swallowed: a prepared transaction that cannot be committed means the batch's records
    would be lost, so the query stops.
    """


class TransactionExpiredError(UnalignedError):
    """A batch was not decided because a prepared transaction can no longer commit (the broker
    aborted it after ``kafka.transaction.timeout.ms``, or another producer fenced it). Nothing
    of the batch was written; it runs again when the query restarts."""


class TransactionAbortError(UnalignedError):
    """The broker refused to abort a prepared transaction (already committed, fenced, unknown)."""


class TransactionWriteError(UnalignedError):
    """Records could not be written into a Kafka transaction (a send failed or timed out).

    The transaction must not be prepared or committed: some of its records are missing.
    """


class AbandonError(UnalignedError):
    """``unaligned abandon`` cannot end the batch as asked: the message says why and what
    choice is left."""


class CommitLogError(UnalignedError):
    """The sink's durable state under the checkpoint is unreadable or inconsistent."""


class TableSchemaError(SchemaMismatchError):
    """An Iceberg or Delta table's schema does not take the query's columns (a missing column,
    another type, a nullable column into a required one). Raised before any data moves; the
    message names the columns and the way out (``mergeSchema``, or another table)."""


class TableCommitError(UnalignedError):
    """An Iceberg or Delta table refused a batch's commit for a reason retrying cannot cure, or
    kept refusing it past the sink's retries (the message names the table, the batch and the
    last refusal). Nothing of the batch is lost: its decision stays in the commit log and the
    next run commits it once."""


class TableUnavailableError(UnalignedError, ConnectionError):
    """An Iceberg catalog or a table's storage could not be reached, or the optional package a
    table format needs is not installed; the message names the catalog or location."""


class TaskContextError(UnalignedError, RuntimeError):
    """Code that must run inside a Spark task (the sink's ``write()``) ran outside one."""


# --- unaligned checkpoints ------------------------------------------------------------------------


class ChannelStateError(UnalignedError):
    """Channel state (rows snapshotted at an unaligned barrier) is missing or corrupt.

    The message names the file (or the inline record) and the barrier. The query stops: the
    rows it holds are never skipped.
    """


class PendingStateLayoutError(UnalignedError):
    """Channel state is pending for a sink task layout the batch cannot map to its own (the
    number of sink tasks changed behind a shuffle): writing it could reorder keys, so the batch
    is not decided. The message names the pending state and the way out."""


class BarrierError(UnalignedError):
    """A barrier (Spark's offset log entry or query metadata for a batch) is missing or malformed.

    The message names the file and the batch id.
    """


class NotACheckpointError(UnalignedError, ValueError):
    """A path given as a query's checkpoint is not one a ``format("unaligned")`` query wrote.

    The message names the path and what was missing (Spark's ``offsets/`` log with an offset
    that carries a ``barrierToken``).
    """


class StopTimeoutError(UnalignedError, TimeoutError):
    """A stop (``unaligned.stop`` or ``unaligned stop``) did not complete within its timeout.

    The message says what it waited for and that the request stays recorded under the
    checkpoint: the query honours it at its next barrier unless it is withdrawn.
    """


class QueryNotRunningError(UnalignedError, RuntimeError):
    """A stop found the query not running, or the query ended before the stop completed.

    The message says which, and whether the request stays recorded under the checkpoint (it
    does when the query ended after the request was made: its next run honours it).
    """


# --- test harness ---------------------------------------------------------------------------


class InjectedFailureError(UnalignedError, RuntimeError):
    """A fail point armed by a test (``UNALIGNED_CRASH_AT``, see _util/crash_points.py) fired."""


class EmbeddedKafkaError(UnalignedError):
    """The embedded broker could not be built, started, or controlled."""


class EmbeddedRegistryError(UnalignedError):
    """The test Schema Registry (``unaligned.testing.registry_server``) could not be fetched,
    started or reached: no Java 21+, Maven failed, or the server exited (its log is quoted)."""


class EmbeddedCatalogError(UnalignedError):
    """The test Iceberg REST catalog (``unaligned.testing.iceberg_rest_server``) could not be
    built, started or reached: Maven failed, a jar is missing, or the server exited (its log is
    quoted)."""
