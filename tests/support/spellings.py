"""Finds FlashInfer names spelled in a module's code, for the "only _surface spells them" tests.

A FlashInfer function, class or submodule name that :mod:`fi_compat._surface` declares may
appear in docstrings, and fi-compat's own drop-in names may appear as themselves; anywhere
else in a string constant it is a second description of FlashInfer, which the tests of the
package (``tests/test_surface.py``) and of the tools (``tests/recorder/test_recorder.py``) refuse.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fi_compat.comm
import fi_compat.comm.mnnvl
from fi_compat import _surface
from fi_compat._surface import ALL_SYMBOLS, COMM

__all__ = ["spellings"]


def _flashinfer_names() -> set[str]:
    """Names of FlashInfer's functions, classes and submodules that only _surface holds."""
    names = {_surface.PLAN_IMPL, _surface.CUDART_MODULE}
    for symbol in ALL_SYMBOLS:
        names.add(symbol.key)
        for home in symbol.homes:
            names.add(home.name)
            if home.module not in (_surface.FLASHINFER, COMM):
                names.add(home.module)
    return names


_SPELLED = re.compile(
    r"(?<!\w)(" + "|".join(map(re.escape, sorted(_flashinfer_names(), key=len)[::-1])) + r")(?!\w)"
)


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants in ``tree``: those of modules, classes and
    functions, and attribute docstrings (a string statement right after an assignment)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            for index, statement in enumerate(node.body):
                first = index == 0
                after_assignment = not first and isinstance(
                    node.body[index - 1], ast.Assign | ast.AnnAssign
                )
                if (
                    (first or after_assignment)
                    and isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                ):
                    found.add(id(statement.value))
    return found


#: fi-compat's own drop-in names (``fi_compat.comm.allreduce_fusion``, ...) are FlashInfer's
#: by design: a string that is exactly one of them (an ``__all__`` entry) or names it in
#: ``fi_compat.comm`` is about fi-compat, not FlashInfer.
_DROP_IN = frozenset((*fi_compat.comm.__all__, *fi_compat.comm.mnnvl.__all__))
_OURS = re.compile(r"fi_compat\.comm\.\w+")


def spellings(path: Path, *, own_names: bool = True) -> list[str]:
    """Every FlashInfer name ``path``'s code spells. ``own_names``: a string that is exactly
    one of fi-compat's drop-in names is fi-compat's (the package's ``__all__`` entries); the
    tools, which declare no drop-in, pass False."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if own_names and node.value in _DROP_IN:
                continue
            for match in _SPELLED.finditer(_OURS.sub("", node.value)):
                found.append(f"line {node.lineno}: {match.group(1)!r} in {node.value!r}")
    return found
