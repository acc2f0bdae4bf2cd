"""The channel-state file format: the header the writer puts in the Avro file, as documented in
unaligned.channel_state.format (checkpoints written by earlier versions must still replay)."""

from __future__ import annotations

from pathlib import Path

import fastavro
import pytest

from channel_state_rows import KAFKA_SCHEMA, kafka_batch, write_state
from unaligned.channel_state.avro_rows import decode_arrow_schema
from unaligned.channel_state.format import META_FORMAT_VERSION, check_header, state_header
from unaligned.channel_state.refs import FileChannelState
from unaligned.errors import ChannelStateError


def test_the_writer_puts_exactly_the_documented_header_in_the_file(tmp_path: Path) -> None:
    ref = write_state(tmp_path, [kafka_batch(5)], inline_threshold_bytes=0, codec="deflate")
    assert isinstance(ref, FileChannelState)
    with open(ref.path, "rb") as f:
        metadata = fastavro.reader(f).metadata
    ours = {k: v for k, v in metadata.items() if not k.startswith("avro.")}
    schema_text = ours.pop("unaligned.arrow_schema")
    assert ours == {
        "unaligned.channel_state.format_version": "1",
        "unaligned.channel_state.schema_version": "1",
        "unaligned.barrier_id": "7",
        "unaligned.query_id": "query-1",
        "unaligned.task_index": "3",
        "unaligned.write_id": ref.write_id,
    }
    assert decode_arrow_schema(schema_text).equals(KAFKA_SCHEMA, check_metadata=True)
    assert metadata["avro.codec"] == "deflate"


def test_check_header_returns_the_stored_schema_and_refuses_another_format(
    tmp_path: Path,
) -> None:
    ref = write_state(tmp_path, [kafka_batch(1)], inline_threshold_bytes=0)
    header = state_header(
        barrier_id=ref.barrier_id,
        query_id=ref.query_id,
        task_index=ref.task_index,
        write_id=ref.write_id,
        schema=KAFKA_SCHEMA,
    )
    assert check_header(ref, header).equals(KAFKA_SCHEMA)
    with pytest.raises(ChannelStateError, match="format version is '2', expected 1"):
        check_header(ref, header | {META_FORMAT_VERSION: "2"})
    with pytest.raises(ChannelStateError, match="no readable Arrow schema"):
        check_header(ref, header | {"unaligned.arrow_schema": "not base64!"})
