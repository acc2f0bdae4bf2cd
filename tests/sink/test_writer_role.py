"""Which Spark worker asked for the stream writer, told from the call stack (no Spark needed)."""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unaligned.sink.writer_role import COMMIT_RUNNER_MODULE, PLANNER_MODULE, WriterRole, writer_role


def test_pyspark_worker_modules_still_exist_and_call_stream_writer() -> None:
    """Fails if pyspark renames or restructures the two workers writer_role() relies on."""
    for module in (PLANNER_MODULE, COMMIT_RUNNER_MODULE):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, f"{module} is gone from pyspark"
        source = Path(spec.origin).read_text()
        assert ".streamWriter(" in source, f"{module} no longer calls streamWriter"
    runner = Path(importlib.util.find_spec(COMMIT_RUNNER_MODULE).origin).read_text()  # type: ignore[union-attr]
    assert "writer.commit(" in runner and "writer.abort(" in runner


def _call_in_module(module_name: str, fn: Callable[[], Any], spec_name: str | None = None) -> Any:
    """Run ``fn`` from a frame whose globals look like module ``module_name``."""
    namespace: dict[str, Any] = {"__name__": module_name, "fn": fn}
    if spec_name is not None:
        namespace["__spec__"] = types.SimpleNamespace(name=spec_name)
    exec("def call():\n    return fn()\n", namespace)
    return namespace["call"]()


def test_writer_role_from_the_call_stack() -> None:
    assert writer_role() is WriterRole.OTHER
    assert _call_in_module(PLANNER_MODULE, writer_role) is WriterRole.PLANNER
    assert _call_in_module(COMMIT_RUNNER_MODULE, writer_role) is WriterRole.COMMITTER
    # A simple (non-daemon) worker runs the module as __main__ (python -m).
    assert _call_in_module("__main__", writer_role, PLANNER_MODULE) is WriterRole.PLANNER
    assert _call_in_module("__main__", writer_role, "something.else") is WriterRole.OTHER


def test_nearest_worker_module_wins() -> None:
    inner = lambda: _call_in_module(COMMIT_RUNNER_MODULE, writer_role)  # noqa: E731
    assert _call_in_module(PLANNER_MODULE, inner) is WriterRole.COMMITTER
