"""Imports only go down the layers of ARCHITECTURE.md, and no module imports itself through
others (``tests/import_layers.py``, run by ``./dev lint`` too)."""

from __future__ import annotations

from pathlib import Path

from import_layers import LAYERS, check, main

PACKAGE = Path(__file__).parents[1] / "pysrc" / "unaligned"


def test_the_package_imports_only_down_and_has_no_module_cycle() -> None:
    assert check(PACKAGE) == []
    assert main([str(PACKAGE)]) == 0


def tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "unaligned"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_an_upward_import_fails_also_when_lazy_or_relative(tmp_path: Path) -> None:
    package = tree(
        tmp_path,
        {
            "errors.py": "",
            "barriers/__init__.py": "",
            "barriers/metrics.py": "def f():\n    from ..sink import options\n",
            "sink/__init__.py": "",
            "sink/options.py": "from unaligned import errors\n",
        },
    )
    assert check(package) == [
        "unaligned.barriers.metrics:2 imports unaligned.sink.options: sink is above barriers"
    ]
    assert main([str(package)]) == 1


def test_a_module_cycle_fails_also_within_a_package_and_under_type_checking(
    tmp_path: Path,
) -> None:
    package = tree(
        tmp_path,
        {
            "barriers/__init__.py": "",
            "barriers/a.py": "from unaligned.barriers.b import x\n",
            "barriers/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from unaligned.barriers import a\nx = 1\n"
            ),
        },
    )
    assert check(package) == ["module cycle: unaligned.barriers.a <-> unaligned.barriers.b"]


def test_an_import_of_a_higher_sub_package_fails(tmp_path: Path) -> None:
    package = tree(
        tmp_path,
        {
            "kafka/__init__.py": "",
            "kafka/records/__init__.py": "",
            "kafka/records/decoder.py": "from unaligned.kafka.fetch import wire\n",
            "kafka/fetch/__init__.py": "",
            "kafka/fetch/wire.py": "from unaligned.kafka.records import layout\n",
            "kafka/records/layout.py": "",
            "kafka/elsewhere.py": "",
        },
    )
    assert check(package) == [
        "unaligned.kafka.elsewhere: its part 'elsewhere' is in no layer of kafka",
        "unaligned.kafka.records.decoder:1 imports unaligned.kafka.fetch.wire: kafka.fetch is "
        "above kafka.records",
    ]


def test_a_part_in_no_layer_fails(tmp_path: Path) -> None:
    package = tree(tmp_path, {"newthing.py": "from unaligned import errors\n", "errors.py": ""})
    assert check(package) == ["unaligned.newthing: its part 'newthing' is in no layer"]


def test_every_layer_names_distinct_parts() -> None:
    parts = [part for layer in LAYERS for part in layer]
    assert len(parts) == len(set(parts))
