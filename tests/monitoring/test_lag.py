"""Offsets behind latest from a progress report's sources."""

from __future__ import annotations

import json

from unaligned.monitoring.lag import OffsetsBehind, offsets_behind


def ours(positions: dict[str, dict[str, int]], token: bool = True) -> dict[str, object]:
    offset: dict[str, object] = {"offsets": positions, "idleBarrier": 0}
    if token:
        offset["barrierToken"] = "tok"
    return offset


def test_behind_is_latest_minus_end_per_partition_over_every_source_of_ours() -> None:
    sources = [
        {  # as query.lastProgress gives them: parsed JSON
            "endOffset": ours({"a": {"0": 10, "1": 50}}),
            "latestOffset": ours({"a": {"0": 40, "1": 50}}, token=False),
        },
        {  # as a listener event gives them: JSON text; partition 1 not reached yet
            "endOffset": json.dumps(ours({"b": {"0": 5}})),
            "latestOffset": json.dumps(ours({"b": {"0": 7, "1": 4}}, token=False)),
        },
        {"endOffset": "12", "latestOffset": "15"},  # another kind of source: ignored
    ]
    assert offsets_behind(sources) == OffsetsBehind(min=0, avg=9.0, max=30, partitions=4)
    assert offsets_behind(sources[:1]).to_dict() == {  # type: ignore[union-attr]
        "minOffsetsBehindLatest": 0,
        "avgOffsetsBehindLatest": 15.0,
        "maxOffsetsBehindLatest": 30,
        "partitions": 2,
    }


def test_no_source_of_ours_or_no_latest_offset_gives_none() -> None:
    assert offsets_behind([]) is None
    assert offsets_behind([{"endOffset": "12", "latestOffset": "15"}]) is None
    assert offsets_behind([{"endOffset": ours({"a": {"0": 1}}), "latestOffset": None}]) is None


def test_an_end_past_the_latest_counts_as_zero_behind() -> None:
    sources = [{"endOffset": ours({"a": {"0": 9}}), "latestOffset": ours({"a": {"0": 7}})}]
    assert offsets_behind(sources) == OffsetsBehind(0, 0.0, 0, 1)
