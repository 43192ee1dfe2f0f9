"""The house's shape: which of fi_compat's modules import which.

Every import counts, at any depth: at the top of a module, inside a function (imported on
first use) and under ``TYPE_CHECKING``, because a cycle among any of them is two modules
that cannot be read, changed or moved apart. A module reaching the package above it is an
import too. The cycles that are left are listed with why; comm has none.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import absolute, module_name

PACKAGE = Path(__file__).resolve().parents[1] / "fi_compat"

#: Sorted cycles (strongly connected modules) -> why they are left.
ALLOWED: dict[tuple[str, ...], str] = {
    (
        "fi_compat._records._classes",
        "fi_compat._records._parse",
        "fi_compat._records._store",
    ): "a recorded class reads its module's record on first use (ClassRecord.module); "
    "the record store parses the classes it holds",
}


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under ``root`` (a package directory): dotted name -> (file, package)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        name, package = module_name(path, root)
        found[name] = (path, package)
    return found


def imports(name: str, path: Path, package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its text."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, name, package) or ""
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in known:
                    found.add(child)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(tuple(sorted(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def graph_of(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {
        name: imports(name, path, package, set(known)) for name, (path, package) in known.items()
    }


def test_no_import_cycle_but_the_listed_ones() -> None:
    found = cycles(graph_of(PACKAGE))
    assert [group for group in found if group not in ALLOWED] == []
    assert [group for group in ALLOWED if group not in found] == [], "a listed cycle is gone"
    assert not [group for group in found if any(".comm" in name for name in group)]


def test_the_release_model_is_asked_not_read_again() -> None:
    """``_records/`` answers what each release has and takes, and imports nothing of
    ``upgrade/`` (data flows one way); ``upgrade/`` asks it through its facts, the history
    between two releases and path resolution, never reading the records' store itself."""
    graph = graph_of(PACKAGE)
    model = {name for name in graph if name.startswith("fi_compat._records")}
    assert not {(name, other) for name in model for other in graph[name] if ".upgrade" in other}
    asked = {
        other
        for name, found in graph.items()
        if name.startswith("fi_compat.upgrade")
        for other in found & model
    }
    assert asked == {
        "fi_compat._records",
        "fi_compat._records._facts",
        "fi_compat._records._history",
        "fi_compat._records._resolve",
    }


def test_the_engine_source_is_read_apart_from_the_releases() -> None:
    """``_engine_source/`` reads an engine's code and knows nothing of FlashInfer's releases:
    outside itself it imports only ``_surface`` (the attention families' names), nothing of
    ``upgrade/`` or ``_records/`` (the judge imports its uses: data flows one way); and
    ``upgrade/`` asks it through the package, never its modules."""
    graph = graph_of(PACKAGE)
    reader = {name for name in graph if name.startswith("fi_compat._engine_source")}
    assert "fi_compat._engine_source.read" in reader
    outside = {other for name in reader for other in graph[name] - reader}
    assert outside == {"fi_compat._surface"}
    asked = {
        other
        for name, found in graph.items()
        if name.startswith("fi_compat.upgrade")
        for other in found & reader
    }
    assert asked == {"fi_compat._engine_source"}


def test_comm_holds_only_modules() -> None:
    """``fi_compat/comm/`` holds its modules and nothing else (its measurements are in
    ``fi_compat/_measured/``); how many there are is what their roles make it."""
    comm = sorted(path.name for path in (PACKAGE / "comm").iterdir() if path.name != "__pycache__")
    assert all(name.endswith(".py") for name in comm), comm


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A cycle through a relative import, a function-level import, a ``TYPE_CHECKING``
    import and a child reaching its package are each found."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("from pkg import a\n", encoding="utf-8")
    (root / "a.py").write_text("def f():\n    from . import b\n", encoding="utf-8")
    (root / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n",
        encoding="utf-8",
    )
    (root / "sub" / "__init__.py").write_text("from . import c\n", encoding="utf-8")
    (root / "sub" / "c.py").write_text("from .. import sub\nimport pkg.sub.d\n", encoding="utf-8")
    (root / "sub" / "d.py").write_text("x = 1\n", encoding="utf-8")
    (root / "e.py").write_text("import pkg.a\n", encoding="utf-8")
    assert cycles(graph_of(root)) == [("pkg.a", "pkg.b"), ("pkg.sub", "pkg.sub.c")]


#: A file a newcomer can read in one sitting; past this, it holds more than one role.
LONGEST = 800


def test_no_module_is_longer_than_one_role() -> None:
    """No module of fi_compat passes :data:`LONGEST` lines. When one does, cut it by what its
    parts do (each new module named for the question it answers), not at a line number."""
    lengths = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert len(lengths) > 100
    assert {path: n for path, n in lengths.items() if n > LONGEST} == {}
