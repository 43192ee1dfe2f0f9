"""One name, one meaning: no class or type alias is defined in two ``fi_compat`` modules.

A reader who meets ``Call`` or ``Gate`` should find one definition, not guess which of two.
Module-level classes count, and CamelCase names bound to a type expression (an alias such
as ``JSONRecord = dict[str, Any]``); names a module imports are not definitions.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fi_compat"


def _defined(tree: ast.Module) -> list[str]:
    """The class and type-alias names a module defines at its top level."""
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            alias = isinstance(value, (ast.Name, ast.Subscript, ast.Attribute, ast.BinOp))
            if isinstance(node, ast.AnnAssign) and "TypeAlias" in ast.unparse(node.annotation):
                alias = True
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else ""
                if alias and name[:1].isupper() and not name.isupper():
                    found.append(name)
    return found


def definitions(root: Path) -> dict[str, list[str]]:
    """Name -> the modules under ``root`` defining it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name in _defined(tree):
            where[name].append(str(path.relative_to(root)))
    return dict(where)


def test_no_class_or_alias_name_is_defined_twice() -> None:
    twice = {name: paths for name, paths in definitions(PACKAGE).items() if len(paths) > 1}
    assert twice == {}


def test_the_check_sees_a_name_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Call:\n    pass\nRecord = dict[str, int]\n")
    (tmp_path / "b.py").write_text(
        "from a import Call\nCall2 = Call\nRecord = dict[str, str]\nLIMIT = int\n"
    )
    found = definitions(tmp_path)
    assert found["Record"] == ["a.py", "b.py"]
    assert found["Call"] == ["a.py"]
    assert found["Call2"] == ["b.py"]  # an alias is a definition
    assert "LIMIT" not in found  # a constant, not an alias name
