"""The package's import order: imports only go down the layers, and no module cycles.

``./dev lint`` runs ``python tests/import_layers.py``; ``tests/test_import_layers.py`` runs the
same check over the package and over small trees that break it. Every import counts: at module
level, inside a function (lazy) and under ``TYPE_CHECKING``. The order is documented in
ARCHITECTURE.md, "Import layers"; a part of the package that is not listed is an error.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

PACKAGE = "unaligned"

#: Lowest first. A part may import parts of its own layer or of a lower one, never a higher one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("_util", "options"),
    ("tuning", "testing"),
    ("kafka", "registry"),
    ("channel_state",),
    ("checkpoint",),
    ("barriers",),
    ("finishing",),
    ("source", "sink"),
    ("data_source",),
    ("inspection", "monitoring", "__init__"),
    ("demo",),
    ("cli",),
    ("manual",),
)

#: Layers inside a package, lowest first, in the same way: ``kafka``'s sub-packages.
SUBLAYERS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "kafka": (
        ("__init__", "partitions"),
        ("login",),
        ("records", "clients"),
        ("fetch", "transactions"),
        ("produce",),
    ),
    "sink": (
        (
            "__init__",
            "kafka_target",
            "table_target",
            "options",
            "commit_log",
            "writer_role",
            "participant",
            "recovery",
            "pending_layout",
            "barrier_outcome",
            "two_phase_commit",
        ),
        ("files", "topics", "tables"),
        ("stream_writer_factory",),
    ),
}


def module_name(root: Path, path: Path) -> str:
    """``unaligned.sink.options`` for ``<root>/sink/options.py`` (a package: its name)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, path): path for path in sorted(root.rglob("*.py"))}


def _imports(tree: ast.AST, name: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(line, imported names) of every import of the package in the module ``name``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield str(node.lineno), [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield str(node.lineno), [f"{module}.{a.name}" for a in node.names] + [module]


def import_graph(root: Path) -> dict[str, dict[str, str]]:
    """module -> {imported module of the package: line of the first import}."""
    known = modules(root)
    graph: dict[str, dict[str, str]] = {}
    for name, path in known.items():
        edges: dict[str, str] = {}
        tree = ast.parse(path.read_text(), str(path))
        for line, candidates in _imports(tree, name, path.name == "__init__.py"):
            # "from pkg import module" imports the module; "from pkg import name" the package
            target = next((c for c in candidates if c in known), None)
            if target is not None and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def part_of(module: str) -> str:
    """The layered part a module belongs to: ``sink`` for ``unaligned.sink.options``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def sub_part_of(module: str) -> str:
    """The part within its package: ``fetch`` for ``unaligned.kafka.fetch.range_fetch``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def _layer_index(layers: Sequence[Sequence[str]]) -> dict[str, int]:
    return {part: index for index, layer in enumerate(layers) for part in layer}


def upward_imports(
    graph: Mapping[str, Mapping[str, str]],
    layers: Sequence[Sequence[str]] = LAYERS,
    sublayers: Mapping[str, Sequence[Sequence[str]]] = SUBLAYERS,
) -> list[str]:
    """Every import of a higher layer (or, within a package of ``sublayers``, of a higher
    sub-layer), and every module of a part no layer lists."""
    index = _layer_index(layers)
    sub_index = {package: _layer_index(inner) for package, inner in sublayers.items()}
    problems = []
    for module in sorted(graph):
        part = part_of(module)
        if part not in index:
            problems.append(f"{module}: its part {part!r} is in no layer")
            continue
        inner = sub_index.get(part)
        if inner is not None and sub_part_of(module) not in inner:
            problems.append(f"{module}: its part {sub_part_of(module)!r} is in no layer of {part}")
            continue
        for target, line in sorted(graph[module].items()):
            if part_of(target) in index and index[part_of(target)] > index[part]:
                problems.append(
                    f"{module}:{line} imports {target}: {part_of(target)} is above {part}"
                )
            elif (
                inner is not None
                and part_of(target) == part
                and inner.get(sub_part_of(target), -1) > inner[sub_part_of(module)]
            ):
                problems.append(
                    f"{module}:{line} imports {target}: {part}.{sub_part_of(target)} is above "
                    f"{part}.{sub_part_of(module)}"
                )
    return problems


def cycles(graph: Mapping[str, Mapping[str, str]]) -> list[list[str]]:
    """The module cycles (strongly connected components of more than one module; Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def check(root: Path, layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """Every problem of the package at ``root``; empty when imports only go down."""
    graph = import_graph(root)
    problems = upward_imports(graph, layers)
    problems += [f"module cycle: {' <-> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def main(argv: Sequence[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).parents[1] / "pysrc" / PACKAGE
    problems = check(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            "imports must go down the layers of ARCHITECTURE.md, 'Import layers'", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    sys.exit(main(sys.argv[1:]))
