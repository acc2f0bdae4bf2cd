"""Building the sink's stream writer, without Spark or a broker: the participant each target
gets, its transactional id prefix, and the input columns the writer replays channel state by.

Recovery only in Spark's planner: test_two_phase_commit.py (it needs a prepared task)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from unaligned.errors import OptionError, SinkConfigurationError
from unaligned.sink.files.file_participant import FileParticipant
from unaligned.sink.stream_writer_factory import build_stream_writer
from unaligned.sink.topics.kafka_id_pool import default_transactional_id_prefix, owner_tag

VALUE_ONLY = StructType([StructField("value", StringType())])


def _kafka_options(checkpoint: Path, **extra: str) -> dict[str, str]:
    return {
        "checkpointlocation": str(checkpoint),
        "kafka.bootstrap.servers": "127.0.0.1:1",
        **extra,
    }


QUERY_ID = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"


def test_default_stem_comes_from_the_query_id(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text(f'{{"id":"{QUERY_ID}"}}\n')
    writer = build_stream_writer(_kafka_options(tmp_path, topic="t"), VALUE_ONLY)
    assert writer.participant.id_stem == f"unaligned-{QUERY_ID}"  # type: ignore[attr-defined]
    assert writer.participant.transactional_id(2, 1).endswith("-2-1")  # type: ignore[attr-defined]
    assert default_transactional_id_prefix("q") == "unaligned-q"


def test_a_users_prefix_is_followed_by_the_querys_owner_tag(tmp_path: Path) -> None:
    """Two queries with one prefix get two stems: neither can take the other's ids."""
    (tmp_path / "metadata").write_text(f'{{"id":"{QUERY_ID}"}}\n')
    writer = build_stream_writer(
        _kafka_options(tmp_path, topic="t", transactionalidprefix="mine"), VALUE_ONLY
    )
    stem = writer.participant.id_stem  # type: ignore[attr-defined]
    assert stem == f"mine-{owner_tag(QUERY_ID)}"
    assert owner_tag(QUERY_ID) != owner_tag("another query") and len(owner_tag("x")) == 13


def test_without_a_query_id_no_transactional_id_can_be_made(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigurationError, match="query id"):
        build_stream_writer(_kafka_options(tmp_path, topic="t"), VALUE_ONLY)
    with pytest.raises(SinkConfigurationError, match="query id"):
        build_stream_writer(
            _kafka_options(tmp_path, topic="t", transactionalidprefix="mine"), VALUE_ONLY
        )


def test_kafka_sink_columns_include_topic_only_without_option_topic(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text(f'{{"id":"{QUERY_ID}"}}\n')
    with_topic = build_stream_writer(
        _kafka_options(tmp_path, topic="t", transactionalidprefix="p"), VALUE_ONLY
    )
    assert with_topic._sink_columns == {"value", "key", "partition", "headers", "timestamp"}
    schema = StructType([StructField("value", StringType()), StructField("topic", StringType())])
    per_row = build_stream_writer(_kafka_options(tmp_path, transactionalidprefix="p"), schema)
    assert per_row._sink_columns == {"value", "key", "partition", "headers", "timestamp", "topic"}


def test_file_sink_writes_every_column(tmp_path: Path) -> None:
    schema = StructType([StructField("id", LongType(), False)])
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "metadata").write_text('{"id":"q-1"}')
    writer = build_stream_writer(
        {"checkpointlocation": str(tmp_path / "ck"), "path": str(tmp_path / "out")}, schema
    )
    assert isinstance(writer.participant, FileParticipant)
    assert writer._sink_columns is None
    assert writer._input_schema is not None and writer._input_schema.names == ["id"]


def test_reassigning_pending_state_on_a_rescale_is_refused_with_a_key_column(
    tmp_path: Path,
) -> None:
    """``pendingStateOnRescale=reassign`` may write a key's pending rows after newer ones: only
    for an input without a key column."""
    (tmp_path / "metadata").write_text(f'{{"id":"{QUERY_ID}"}}\n')
    options = _kafka_options(
        tmp_path, topic="t", transactionalidprefix="p", pendingstateonrescale="reassign"
    )
    keyed = StructType([StructField("key", StringType()), StructField("value", StringType())])
    with pytest.raises(SinkConfigurationError, match="input has a key column \\('key'\\)"):
        build_stream_writer(options, keyed)
    writer = build_stream_writer(options, VALUE_ONLY)
    assert writer._options.pending_on_rescale.value == "reassign"
    with pytest.raises(OptionError, match="pendingStateOnRescale"):
        build_stream_writer({**options, "pendingstateonrescale": "shuffle"}, VALUE_ONLY)
