"""Building the sink's stream writer: what ``DataSource.streamWriter`` returns.

:func:`build_stream_writer` parses and checks the sink options, builds the participant (Kafka
transactions or Parquet files) and, in Spark's planner only, runs the checks at query start,
step 3 of the protocol (recovery, :func:`unaligned.sink.recovery.recover`) and channel-state
garbage collection. Which Spark process calls it, and why recovery runs only in the planner:
:mod:`unaligned.sink.two_phase_commit` (the writer it returns, steps 1, 2 and 4) and
:mod:`unaligned.sink.writer_role`.

The Kafka participant is the exactly-once one (transactions,
:mod:`unaligned.sink.topics.kafka_participant`) or, with ``deliveryGuarantee=at-least-once``, the
at-least-once one (:mod:`unaligned.sink.topics.kafka_at_least_once`). The exactly-once participant's
transactional ids share one stem per query, made of the option ``transactionalIdPrefix`` (else
``unaligned``) and the query id that Spark keeps in the checkpoint
(:func:`unaligned.sink.topics.kafka_id_pool.id_stem`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pyspark.sql.types import StructType

from unaligned.barriers.alignment import arrow_input_schema
from unaligned.barriers.barrier import wall_clock_ms
from unaligned.errors import BarrierError, SinkConfigurationError
from unaligned.sink.barrier_outcome import collect_channel_state_garbage
from unaligned.sink.commit_log import CommitLog
from unaligned.sink.kafka_target import DeliveryGuarantee, KafkaTarget
from unaligned.sink.options import FileTarget, PendingPolicy, SinkOptions
from unaligned.sink.participant import Participant
from unaligned.sink.recovery import recover
from unaligned.sink.table_target import TableTarget
from unaligned.sink.two_phase_commit import TwoPhaseCommitWriter
from unaligned.sink.writer_role import WriterRole, writer_role

logger = logging.getLogger(__name__)


def build_stream_writer(options: Mapping[str, str], schema: StructType) -> TwoPhaseCommitWriter:
    """Parse and check everything, recover if Spark is planning a batch, return the writer.

    Raises :class:`SinkConfigurationError` / :class:`SchemaMismatchError` before any data moves.
    """
    sink_options = SinkOptions.parse(options)
    _check_pending_policy(sink_options, schema)
    participant = _make_participant(sink_options, schema)
    role = writer_role()
    logger.debug("stream writer built for role %s", role.value)
    planned_at_ms: int | None = None
    if role is WriterRole.PLANNER:
        participant.check_at_query_start()
        _check_formats(sink_options, schema)
        # Step 3: recovery, in Spark's planner only (see unaligned.sink.two_phase_commit).
        recover(CommitLog(sink_options.checkpoint), participant)
        collect_channel_state_garbage(sink_options)
        planned_at_ms = int(wall_clock_ms())
    return TwoPhaseCommitWriter(
        sink_options,
        participant,
        planned_at_ms,
        input_schema=arrow_input_schema(schema),
        sink_columns=_sink_columns(sink_options),
    )


def _check_pending_policy(options: SinkOptions, schema: StructType) -> None:
    """``pendingStateOnRescale=reassign`` may reorder rows: only for an input without a key
    column, where the user said order cannot matter (:mod:`unaligned.sink.pending_layout`)."""
    if options.pending_on_rescale is not PendingPolicy.REASSIGN:
        return
    keys = [f.name for f in schema.fields if f.name.lower() == "key"]
    if keys:
        raise SinkConfigurationError(
            f"pendingStateOnRescale=reassign may write a key's pending rows after newer rows of "
            f"the same key, and the sink's input has a key column ({keys[0]!r}): leave the "
            "option out (the default, refuse, stops a batch whose pending state its task "
            "layout cannot take, and names the way out), or drop the key column"
        )


def _make_participant(options: SinkOptions, schema: StructType) -> Participant:
    target = options.target
    if isinstance(target, FileTarget):
        from unaligned.sink.files.file_participant import FileParticipant

        return FileParticipant.for_query(
            target, schema, options.checkpoint, log_retain_batches=options.min_batches_to_retain
        )
    if isinstance(target, TableTarget):
        from unaligned.sink.tables.table_participant import TableParticipant

        return TableParticipant.for_query(target, schema, options.checkpoint)
    from unaligned.sink.topics.kafka_columns import kafka_columns
    from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix, id_stem

    columns = kafka_columns(schema, target)
    target.client_kwargs()  # maps and checks every kafka.* option now, before any data moves
    if target.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
        from unaligned.sink.topics.kafka_at_least_once import KafkaAtLeastOnceParticipant

        # its client ids: producer-<prefix>-<pid>, as the exactly-once sink's
        return KafkaAtLeastOnceParticipant(
            target,
            columns,
            target.transactional_id_prefix or default_transactional_id_prefix(_query_id(options)),
        )
    from unaligned.sink.topics.kafka_participant import KafkaParticipant

    return KafkaParticipant(
        target, columns, id_stem(target.transactional_id_prefix, _query_id(options))
    )


def _check_formats(options: SinkOptions, schema: StructType) -> None:
    """With Schema Registry formats and option ``topic``: the schemas the columns are written
    with, resolved (and registered, if allowed) now, so a wrong one fails before data moves."""
    target = options.target
    if not isinstance(target, KafkaTarget) or target.formats is None or target.topic is None:
        return
    from unaligned.registry.record_encoding import writer_schema

    arrow = arrow_input_schema(schema)
    for column in target.formats.columns:
        field = next((f for f in arrow if f.name.lower() == column.column), None)
        if field is not None:
            writer_schema(target.formats, column, target.topic, field.type)


def _query_id(options: SinkOptions) -> str:
    """The query id Spark keeps in the checkpoint: the owner of the sink's transactional ids."""
    try:
        return options.checkpoint.query_id()
    except BarrierError as exc:
        raise SinkConfigurationError(
            f"cannot read the query id, which the sink's transactional ids are made of, from "
            f"the checkpoint: {exc}"
        ) from exc


def _sink_columns(options: SinkOptions) -> frozenset[str] | None:
    """The input columns the sink writes out (``None``: every column, the file sink)."""
    target = options.target
    if isinstance(target, (FileTarget, TableTarget)):
        return None
    names = {"value", "key", "partition", "headers", "timestamp"}
    if target.formats is not None:
        names |= {f"{c.column}Raw" for c in target.formats.columns}
    return frozenset(names if target.topic is not None else names | {"topic"})
