"""The Kafka client settings of the operator commands (``unaligned inspect``, ``abandon``).

A query's ``kafka.*`` options are not stored in its checkpoint, so a command that asks the
cluster is told how to reach it, as Kafka's own tools are: ``--bootstrap-servers`` and
``--command-config FILE``, a Java properties file of client settings without the ``kafka.``
prefix (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.*``,
...), mapped and checked exactly as the query's options are
(:func:`unaligned.kafka.clients.client_options.client_config_from_options`).
:func:`read_properties` reads the file (``key=value`` or ``key: value``, ``#`` and ``!``
comments, lines continued with a trailing backslash).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unaligned.errors import OptionError
from unaligned.kafka.clients.client_options import client_config_from_options

BOOTSTRAP_TIMEOUT_MS = 10_000
"""How long an unreachable cluster is tried before a command reports it."""


def read_properties(path: Path) -> dict[str, str]:
    """The settings of a Java properties file; :class:`OptionError` naming a bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise OptionError(f"--command-config {path}: cannot read it: {exc}") from exc
    settings: dict[str, str] = {}
    logical = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical, path, number)
        settings[key] = value
        logical = ""
    if logical:
        key, value = _split(logical, path, len(text.splitlines()))
        settings[key] = value
    return settings


def _split(line: str, path: Path, number: int) -> tuple[str, str]:
    cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
    if cut < 0:
        raise OptionError(
            f"--command-config {path}, line {number}: expected 'name=value' (a Kafka client "
            "setting such as security.protocol=SASL_SSL)"
        )
    return line[:cut].strip().lower(), line[cut + 1 :].strip()


def command_client_kwargs(bootstrap_servers: str, command_config: Path | None) -> dict[str, Any]:
    """kafka-python kwargs for ``bootstrap_servers`` and the settings of ``command_config``."""
    settings = read_properties(command_config) if command_config is not None else {}
    settings.pop("bootstrap.servers", None)
    params = {**settings, "bootstrap.servers": bootstrap_servers}
    kwargs = dict(client_config_from_options(params).client_kwargs)
    kwargs.setdefault("bootstrap_timeout_ms", BOOTSTRAP_TIMEOUT_MS)
    kwargs.setdefault("reconnect_backoff_max_ms", 1000)
    return kwargs
