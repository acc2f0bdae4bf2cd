"""Benchmarks: ``python -m benchmarks [name ...]`` runs every ``bench_*.py`` module here (or the
named ones, with or without the ``bench_`` prefix). Each module has a ``main()`` that prints its
figures and writes ``benchmarks/results/<name>.json``. Benchmarks are never run by the tests and
nothing asserts on their timings."""

from __future__ import annotations

from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
