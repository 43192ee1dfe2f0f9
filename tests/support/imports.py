"""How a module of a package is named, and where its ``from`` imports point.

Shared by the house's structure tests: the private-name check
(``tests/test_private_names.py``) and the import-cycle check (``tests/test_import_graph.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["absolute", "module_name"]


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted name of the module at ``path`` inside the package directory ``root``,
    and whether it is a package (its ``__init__.py``)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def absolute(node: ast.ImportFrom, module: str, package: bool) -> str | None:
    """The module a ``from`` import in ``module`` (``package``: its ``__init__``) reads
    from, relative imports resolved; None for ``from . import x`` above the top."""
    if not node.level:
        return node.module
    base = module.split(".") if package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)
