"""The Avro container codecs channel state can be written with, and the check that one is usable.

Kept apart from :mod:`unaligned.channel_state.avro_rows` (fastavro, numpy, pyarrow) so that
parsing the sink's options (in the planner, the commit runner and every task) loads none of
them: a codec is checked by importing only the module fastavro would use for it.
"""

from __future__ import annotations

import importlib

from unaligned.errors import OptionError

CODECS = ("null", "deflate", "snappy", "zstandard")
#: Codec -> (modules fastavro can use for it, the package to install).
_CODEC_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "snappy": (("cramjam", "snappy"), "cramjam"),
    "zstandard": (("compression.zstd", "backports.zstd"), "backports.zstd"),
}


def check_codec(codec: str) -> None:
    """Raise OptionError if ``codec`` is unknown or needs a package that is not installed."""
    if codec not in CODECS:
        raise OptionError(f"channel state codec {codec!r} is not one of {', '.join(CODECS)}")
    if codec not in _CODEC_MODULES:
        return
    modules, package = _CODEC_MODULES[codec]
    for module in modules:
        try:
            importlib.import_module(module)
            return
        except ImportError:
            continue
    raise OptionError(
        f"channel state codec {codec!r} needs the Python package {package!r}, which is not "
        f"installed (install {package!r}, or choose codec 'deflate' or 'null')"
    )
