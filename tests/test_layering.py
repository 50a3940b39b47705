"""The layering of docs/architecture.md holds: every import points down the order, and no
two modules import each other, directly or round a longer loop.

Imports are read with ``ast`` at any depth of a file (a function-level import is still an
edge), relative imports are resolved against their package, and ``from pkg import name``
counts as an import of ``pkg.name`` when that is a module. The checker itself is shown to
catch a planted upward import and a planted cycle, so this test cannot pass vacuously.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lowest first; a module may import its own layer and any layer before it. A module
# belongs to the longest prefix listed here. Kept in step with docs/architecture.md.
LAYERS: tuple[str, ...] = (
    "versions",
    "reference",
    "kernels.contract",
    "kernels.runtime",
    "kernels.hardware",
    "kernels.adapters",
    "kernels",
    "run_records",
    "conformance.suite",
    "reports.jax_versions",
    "reports.run_report",
    "reports.gate",
    "reports.matrix_report",
    "reports.ledger",
    "reports.bisection",
    "reports",
    "conformance.plan",
    "conformance.judge",
    "conformance.harness",
    "conformance",
    "benchmarks",
    "noxfile",
    "scripts",
)
SOURCES: tuple[str, ...] = (
    "versions",
    "reference",
    "kernels",
    "run_records",
    "reports",
    "conformance",
    "benchmarks",
    "noxfile.py",
    "scripts",
)


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` at ``line`` of the importer's file."""

    importer: str
    imported: str
    line: int


def module_files(root: Path, sources: tuple[str, ...] = SOURCES) -> dict[str, Path]:
    """Every module under the source folders, by its dotted name (``pkg`` for ``pkg/__init__.py``)."""
    found: dict[str, Path] = {}
    for source in sources:
        path = root / source
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if _is_source(p, root))
        for file in files:
            parts = list(file.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


def _is_source(path: Path, root: Path) -> bool:
    """Python in an importable folder: a run's output (``reports/jax-0.10.2/repro/...``, its
    repro scripts included) sits in folders no import can name, and is not the project's code."""
    folders = path.relative_to(root).parts[:-1]
    return all(part.isidentifier() for part in folders) and _is_python(path)


def _is_python(path: Path) -> bool:
    """A module, or an executable Python script without the suffix (scripts/device-bench)."""
    if not path.is_file() or "__pycache__" in path.parts:
        return False
    if path.suffix == ".py":
        return True
    first = path.read_bytes().split(b"\n", 1)[0]
    return path.suffix == "" and first.startswith(b"#!") and b"python" in first


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return files[name].name == "__init__.py"


def _resolve(name: str, files: dict[str, Path]) -> str | None:
    """The project module ``name`` lands in: itself, or its longest prefix that is a module."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in files:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, tree: ast.AST, files: dict[str, Path]) -> list[Edge]:
    """The project modules ``module`` imports, from every import statement in its tree."""
    package = module if _is_package(module, files) else module.rpartition(".")[0]
    edges: list[Edge] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                if node.level - 1 >= len(base_parts):
                    continue  # climbs above the top-level package: Python refuses it too
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            # `from pkg import name` imports the submodule pkg.name when there is one.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names
            ]
        for target in targets:
            resolved = _resolve(target, files)
            if resolved is not None and resolved != module:
                edges.append(Edge(module, resolved, node.lineno))
    return list(dict.fromkeys(edges))  # `from x import a, b` of one module is one edge


def import_graph(root: Path, sources: tuple[str, ...] = SOURCES) -> list[Edge]:
    files = module_files(root, sources)
    edges: list[Edge] = []
    for module, file in sorted(files.items()):
        edges += imports_of(module, ast.parse(file.read_text(encoding="utf-8"), str(file)), files)
    return edges


def layer_of(module: str, layers: tuple[str, ...] = LAYERS) -> int:
    """The index in ``layers`` of the longest layer prefix of ``module``."""
    best = None
    for index, layer in enumerate(layers):
        if (module == layer or module.startswith(layer + ".")) and (
            best is None or len(layer) > len(layers[best])
        ):
            best = index
    if best is None:
        raise ValueError(
            f"module {module!r} is in no layer; add its folder to LAYERS in tests/test_layering.py"
        )
    return best


def upward_imports(edges: list[Edge], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """One line per import of a higher layer than the importer's."""
    return [
        f"{edge.importer} (layer {layers[layer_of(edge.importer, layers)]}) imports {edge.imported} "
        f"(layer {layers[layer_of(edge.imported, layers)]}) at line {edge.line}"
        for edge in edges
        if layer_of(edge.imported, layers) > layer_of(edge.importer, layers)
    ]


def module_cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def test_every_module_is_in_a_layer():
    unplaced = []
    for module in module_files(ROOT):
        try:
            layer_of(module)
        except ValueError as error:
            unplaced.append(str(error))
    assert not unplaced, "\n".join(unplaced)


def test_no_import_points_up_the_layers():
    upward = upward_imports(import_graph(ROOT))
    assert not upward, "imports against the order of docs/architecture.md:\n" + "\n".join(upward)


def test_no_module_cycle():
    cycles = module_cycles(import_graph(ROOT))
    assert not cycles, "modules that import each other (directly or round a loop):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


PLANTED_LAYERS = ("low", "high")


def test_checker_reports_a_planted_upward_import(tmp_path):
    _plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/clean.py": "import os\n",
            # a function-level relative-free `from pkg import submodule`: the hardest form to see
            "low/sneaky.py": "def f():\n    from high import top\n    return top\n",
            "high/__init__.py": "",
            "high/top.py": "from low import clean\n",
        },
    )
    edges = import_graph(tmp_path, ("low", "high"))
    upward = upward_imports(edges, PLANTED_LAYERS)
    assert upward == ["low.sneaky (layer low) imports high.top (layer high) at line 2"]


def test_checker_resolves_relative_imports(tmp_path):
    _plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/sub/__init__.py": "",
            "low/sub/a.py": "from ...high import top\nfrom . import b\n",
            "low/sub/b.py": "",
            "high/__init__.py": "",
            "high/top.py": "",
        },
    )
    # `...high` from low.sub.a climbs above the root: it is not a project module and not an edge
    edges = import_graph(tmp_path, ("low", "high"))
    assert Edge("low.sub.a", "low.sub.b", 2) in edges
    _plant(tmp_path, {"low/sub/a.py": "from .. import sub\nfrom ..sub.b import x\n"})
    edges = import_graph(tmp_path, ("low", "high"))
    assert {(e.importer, e.imported) for e in edges} == {("low.sub.a", "low.sub"), ("low.sub.a", "low.sub.b")}


def test_checker_reports_a_planted_cycle(tmp_path):
    _plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "from low import b\n",
            "low/b.py": "import low.c\n",
            "low/c.py": "def late():\n    from . import a\n",
            "low/d.py": "from low import a\n",
        },
    )
    assert module_cycles(import_graph(tmp_path, ("low",))) == [["low.a", "low.b", "low.c"]]
