"""The house's floors: no import from a lower floor to a higher one, and no import cycle.

Read from the source (every ``import``, lazy ones inside functions included), not by importing.
The floors, bottom up (``README.md``, "Architecture")::

    cli        the command line: imports everything, nothing imports it
    bench      benchmarks: drive the pipeline, ingest and analytics
    dashboard  reads results and the alert outbox
    pipeline · alerts   (same floor: neither imports the other)
    analytics  algorithms, no Spark, no Kafka
    ingest     readers, decoder, producer
    netmon     the ground floor: configuration, records, results format, logs, jars, broker

A module may import its own package and any package on a lower floor; nothing else.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Package -> floor (0 = ground).
FLOORS: dict[str, int] = {
    "netmon": 0,
    "ingest": 1,
    "analytics": 2,
    "pipeline": 3,
    "alerts": 3,
    "dashboard": 4,
    "bench": 5,
    "cli": 6,
}

Graph = dict[str, set[str]]


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            # ``from pkg import mod`` imports the module pkg.mod when there is one.
            yield from (f"{target}.{alias.name}" for alias in node.names)


def import_graph(root: Path, packages: Mapping[str, int]) -> Graph:
    """Module -> the modules of ``packages`` it imports (only those that exist as files)."""
    files = {
        _module_name(root, p): p
        for package in packages
        if (root / package).is_dir()
        for p in (root / package).rglob("*.py")
    }
    graph: Graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for name in _imports(tree, module, path.name == "__init__.py"):
            # The longest prefix that is one of our modules: "a.b.c" may name a function in "a.b".
            parts = name.split(".")
            while parts and ".".join(parts) not in files:
                parts.pop()
            if parts and ".".join(parts) != module:
                targets.add(".".join(parts))
        graph[module] = targets
    return graph


def upward_imports(graph: Graph, floors: Mapping[str, int]) -> list[str]:
    """``a -> b`` for each import of another package that is not on a lower floor."""
    bad = []
    for module, targets in sorted(graph.items()):
        mine = module.split(".")[0]
        for target in sorted(targets):
            theirs = target.split(".")[0]
            if theirs != mine and floors[theirs] >= floors[mine]:
                bad.append(
                    f"{module} -> {target} ({mine} floor {floors[mine]}, {theirs} floor {floors[theirs]})"
                )
    return bad


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(ROOT, FLOORS)


def test_every_package_has_a_floor() -> None:
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert on_disk == set(FLOORS)


def test_no_import_from_a_lower_floor_to_a_higher_one(graph: Graph) -> None:
    assert upward_imports(graph, FLOORS) == []


def test_no_import_cycle_between_files(graph: Graph) -> None:
    assert cycles(graph) == []


def test_nothing_imports_the_command_line(graph: Graph) -> None:
    assert [
        m
        for m, targets in graph.items()
        if not m.startswith("cli") and any(t.startswith("cli") for t in targets)
    ] == []


def test_the_checks_catch_a_planted_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """The checks on a small tree: one planted upward import and one cycle are reported."""
    for package, files in {
        "netmon": {"__init__.py": "", "config.py": "import netmon.results\n", "results.py": ""},
        "pipeline": {"__init__.py": "", "job.py": "from netmon.config import x\n"},
    }.items():
        (tmp_path / package).mkdir()
        for name, text in files.items():
            (tmp_path / package / name).write_text(text)
    floors = {"netmon": 0, "pipeline": 3}
    clean = import_graph(tmp_path, floors)
    assert upward_imports(clean, floors) == [] and cycles(clean) == []
    # The plant: the ground floor reaches up into the pipeline, lazily, inside a function.
    (tmp_path / "netmon" / "results.py").write_text("def f():\n    from pipeline import job\n")
    (tmp_path / "pipeline" / "job.py").write_text("from netmon.config import x\nfrom . import other\n")
    (tmp_path / "pipeline" / "other.py").write_text("from .job import y\n")
    planted = import_graph(tmp_path, floors)
    assert upward_imports(planted, floors) == [
        "netmon.results -> pipeline (netmon floor 0, pipeline floor 3)",  # the package's __init__ runs
        "netmon.results -> pipeline.job (netmon floor 0, pipeline floor 3)",
    ]
    # config -> results -> job -> config, and job <-> other: one strongly connected component.
    assert cycles(planted) == [["netmon.config", "netmon.results", "pipeline.job", "pipeline.other"]]
