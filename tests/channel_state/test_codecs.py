"""Channel-state codecs: unknown names and missing codec packages are refused by name."""

from __future__ import annotations

import sys

import pytest

from unaligned.channel_state.codecs import check_codec
from unaligned.errors import OptionError


def test_codecs_and_missing_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptionError, match="'lzma' is not one of null, deflate, snappy, zstandard"):
        check_codec("lzma")
    monkeypatch.setitem(sys.modules, "cramjam", None)
    monkeypatch.setitem(sys.modules, "snappy", None)
    with pytest.raises(OptionError, match="codec 'snappy' needs the Python package 'cramjam'"):
        check_codec("snappy")
    monkeypatch.setitem(sys.modules, "compression.zstd", None)
    monkeypatch.setitem(sys.modules, "backports.zstd", None)
    with pytest.raises(OptionError, match="'zstandard' needs the Python package 'backports.zstd'"):
        check_codec("zstandard")
    check_codec("deflate")
