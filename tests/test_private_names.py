"""Private modules offer plain names: no module of fi_compat reads another module's
``_private`` name (packaging's ``_parser.py`` is the model: a private module, public
names). A private *module* is fine to import; a ``_name`` inside one is that module's own.

The exceptions are listed with why; the list is empty and should stay so.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import absolute, module_name

PACKAGE = Path(__file__).resolve().parents[1] / "fi_compat"

#: (importing file, "module._name") -> why it may.
ALLOWED: dict[tuple[str, str], str] = {}


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def cross_private(source: str, module: str, *, package: bool = False) -> list[str]:
    """Every ``module._name`` of another fi_compat module that ``source``, the text of
    module ``module`` (``package``: its ``__init__``), reads."""
    tree = ast.parse(source)
    found, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = absolute(node, module, package)
            if not origin or not origin.startswith("fi_compat") or origin == module:
                continue
            for alias in node.names:
                dotted = f"{origin}.{alias.name}"
                if _is_module(dotted):
                    modules[alias.asname or alias.name] = dotted
                elif _private(alias.name):
                    found.append(dotted)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fi_compat") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and modules[node.value.id] != module
            and _private(node.attr)
            and not _is_module(f"{modules[node.value.id]}.{node.attr}")
        ):
            found.append(f"{modules[node.value.id]}.{node.attr}")
    return found


def test_no_module_reads_another_modules_private_name() -> None:
    reads = {
        (path.relative_to(PACKAGE.parent).as_posix(), dotted)
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, package in [module_name(path, PACKAGE)]
        for dotted in cross_private(path.read_text(encoding="utf-8"), name, package=package)
    }
    assert not reads - ALLOWED.keys(), sorted(reads - ALLOWED.keys())
    assert not ALLOWED.keys() - reads, "listed exceptions that no longer happen"


def test_the_check_sees_each_way_of_reading_a_private_name() -> None:
    source = (
        "from fi_compat._records import _canonical\n"
        "from fi_compat.attention import _reach\n"
        "from . import _unified\n"
        "from ._workspace import _hidden\n"
        "from fi_compat.comm._unified import plain, _own\n"
        "_reach._data()\n"
        "_unified.plain\n"
    )
    assert sorted(cross_private(source, "fi_compat.comm._sample")) == [
        "fi_compat._records._canonical",
        "fi_compat.attention._reach._data",
        "fi_compat.comm._unified._own",
        "fi_compat.comm._workspace._hidden",
    ]
    # a module's own private names are its own
    assert (
        cross_private("from fi_compat.comm._unified import _own\n", "fi_compat.comm._unified") == []
    )
