"""The option reference pages are generated from the options' declarations, and the declarations
are what the code accepts: every option the parsers accept appears in the generated reference,
and no other; the committed pages are what the generator writes; every declared default parses
to the value the code uses."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from unaligned.errors import OptionError
from unaligned.manual.__main__ import PAGES
from unaligned.manual.__main__ import main as manual_main
from unaligned.manual.option_tables import sink_page, source_page
from unaligned.options.declaration import OptionSet
from unaligned.sink.options import SINK_OPTIONS, SinkOptions
from unaligned.source.options import SOURCE_OPTIONS, SourceOptions

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pysrc" / "unaligned"
#: The modules that read option keys (every key they spell must be declared).
READERS = {
    "source": ["source/options.py", "source/position_options.py"],
    "sink": ["sink/options.py", "sink/kafka_target.py"],
    "registry": ["registry/options.py"],  # read for the source and the sink: either declares
}


def _documented(page: str) -> set[str]:
    """The option names in the first column of a generated page's tables."""
    return set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.M))


def _source_refusal(key: str, value: str = "x") -> str | None:
    """The unknown-option message for ``key`` on the source, else ``None`` (accepted, whatever
    else the value's checks say)."""
    try:
        SourceOptions.parse({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", key: value})
    except OptionError as exc:
        return str(exc) if "unknown option" in str(exc) else None
    return None


def _sink_refusal(key: str, tmp_path: Path, value: str = "x") -> str | None:
    base = {"checkpointLocation": str(tmp_path), "kafka.bootstrap.servers": "b:9092"}
    try:
        SinkOptions.parse({**base, "topic": "out", key: value})
    except OptionError as exc:
        return str(exc) if "unknown option" in str(exc) else None
    return None


def test_the_committed_pages_are_what_the_code_declares() -> None:
    assert manual_main(["--check", str(ROOT / "docs")]) == 0, (
        "run ./dev docs to regenerate " + ", ".join(PAGES)
    )


@pytest.mark.parametrize("name", sorted(_documented(source_page())))
def test_every_documented_source_option_is_accepted(name: str) -> None:
    key = name.replace("*", "anything")
    assert _source_refusal(key) is None


@pytest.mark.parametrize("name", sorted(_documented(sink_page())))
def test_every_documented_sink_option_is_accepted(name: str, tmp_path: Path) -> None:
    key = name.replace("*", "anything")
    assert _sink_refusal(key, tmp_path) is None


@pytest.mark.parametrize("side", ["source", "sink", "registry"])
def test_every_key_the_code_reads_is_declared(side: str) -> None:
    """Each option key spelled in the parsing modules (``opts.get("chunkrows")``,
    ``given["subscribe"]``, ``"path" in opts``) is a declared option of that side."""
    sets = {"source": [SOURCE_OPTIONS], "sink": [SINK_OPTIONS]}
    declared: list[OptionSet] = sets.get(side, [SOURCE_OPTIONS, SINK_OPTIONS])
    spelled = set()
    for relative in READERS[side]:
        text = (PACKAGE / relative).read_text()
        spelled |= set(re.findall(r'(?:opts|given|options)(?:\.get\(|\[)"([a-z][a-z.]*)"', text))
        spelled |= set(re.findall(r'"([a-z][a-z.]*)" in (?:opts|given)\b', text))
    if side == "source":  # the source's positions still spell their keys: the pattern works
        assert spelled, "the pattern found no key: it no longer matches the code"
    registry_column = re.compile(r"^(key|value)")
    missing = sorted(
        k for k in spelled if not any(d.knows(k) for d in declared) and not registry_column.match(k)
    )
    assert missing == []


def test_no_undeclared_option_is_accepted(tmp_path: Path) -> None:
    for typo in ("maxOffsetPerTrigger", "startingOffset", "readTask", "schema"):
        assert _source_refusal(typo) is not None, typo
    for typo in ("alignedCheckpointTimout", "chunkRow", "deliveryGuarantees", "groupIdPrefix"):
        assert _sink_refusal(typo, tmp_path) is not None, typo


def test_the_unknown_option_message_lists_the_declared_names(tmp_path: Path) -> None:
    source = _source_refusal("maxOffsetPerTrigger") or ""
    sink = _sink_refusal("chunkRow", tmp_path) or ""
    for name in ("maxOffsetsPerTrigger", "startingOffsets", "valueFormat", "kafka.*"):
        assert name in source
    for name in ("chunkRows", "alignedCheckpointTimeout", "valueRecordName", "kafka.*"):
        assert name in sink
    assert "schema.registry.*" in source and "schema.registry.*" in sink


def test_declared_defaults_are_the_values_the_code_uses(tmp_path: Path) -> None:
    parsed = SourceOptions.parse({"kafka.bootstrap.servers": "b:9092", "subscribe": "t"})
    fields: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(SourceOptions)}
    for spec in SOURCE_OPTIONS:
        if spec.sets in fields and spec.parse is not None:
            expected = None if spec.default is None else spec.value({})
            assert getattr(parsed, spec.sets) == expected, spec.name
            assert fields[spec.sets] == expected, f"{spec.name}: the field's default differs"
    sink = SinkOptions.parse({"checkpointLocation": str(tmp_path), "path": str(tmp_path / "o")})
    alignment = sink.alignment
    assert (alignment.timeout_ms, alignment.max_inflight_bytes) == (30_000, 256 * 1024**2)
    assert (sink.chunk_rows, sink.min_batches_to_retain) == (1000, 100)
    assert (alignment.inline_threshold_bytes, alignment.merge_below_bytes) == (
        20 * 1024,
        16 * 1024**2,
    )
