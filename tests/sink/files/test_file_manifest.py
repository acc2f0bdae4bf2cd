"""The file sink's names per query (compaction: test_manifest_compaction.py)."""

from __future__ import annotations

import pytest

from file_sink_steps import QUERY
from unaligned.errors import SinkConfigurationError
from unaligned.sink.files.file_manifest import (
    check_query_id,
    compacted_manifest_name,
    manifest_name,
    parse_manifest_name,
)


@pytest.mark.parametrize("query_id", ["12345", "a/b", "a.b", ""])
def test_a_query_id_that_cannot_name_files_is_refused(query_id: str) -> None:
    with pytest.raises(SinkConfigurationError, match="cannot name files"):
        check_query_id(query_id)


def test_a_spark_query_id_names_files() -> None:
    assert check_query_id(QUERY) == QUERY


def test_manifest_names_parse_back() -> None:
    entry = parse_manifest_name(manifest_name(12, QUERY))
    assert entry is not None and (entry.query_id, entry.batch_id, entry.compacted) == (
        QUERY,
        12,
        False,
    )
    compacted = parse_manifest_name(compacted_manifest_name(QUERY, 99))
    assert compacted is not None and (compacted.query_id, compacted.batch_id) == (QUERY, 99)
    assert compacted.compacted
    assert parse_manifest_name("0000000003.json") is None  # 0.1.0 development snapshots' name
    assert parse_manifest_name(f".{manifest_name(3, QUERY)}.0123abcd.tmp") is None


# --- entries as earlier versions wrote them ----------------------------------------------------
