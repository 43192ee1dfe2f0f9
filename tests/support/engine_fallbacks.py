"""vLLM 0.11.2's FlashInfer names rebound to fallbacks, and the uses behind them.

vLLM 0.11.2 writes both idioms ``tests/upgrade/test_engine_fallbacks.py`` grades
``fi-compat scan`` on: ``compilation/collective_fusion.py`` keeps ``flashinfer.comm`` only
where it has ``trtllm_allreduce_fusion`` (``flashinfer_comm = flashinfer_comm if
hasattr(...) else None``), and ``v1/attention/backends/mla/common.py`` puts ``object`` in
place of ``BatchPrefillWithRaggedKVCacheWrapper`` where its import fails. The uses behind
them are found by a reading of their own (:func:`fallback_uses`), a plain ``ast`` walk of
one file that shares nothing with the scan: calls of a rebound name and of methods of the
objects it builds, and chains of attributes read off it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.engine_uses import EngineUse
from tests.support.unseen_engines import UnseenEngine

__all__ = ["ENGINE", "FILES", "fallback_uses"]

#: vLLM 0.11.2 pins flashinfer-python 0.5.2.
ENGINE = UnseenEngine("vllm==0.11.2", "3.11", "vllm", "0.5.2")
#: The files writing the two idioms, and how many uses each has behind them at least.
FILES = {
    "vllm/compilation/collective_fusion.py": 10,
    "vllm/v1/attention/backends/mla/common.py": 4,
}


def _flashinfer(module: str | None) -> bool:
    return module is not None and module.split(".")[0] == "flashinfer"


def _rebound(tree: ast.Module) -> dict[str, str]:
    """The top-level names imported from FlashInfer in a ``try`` whose handler binds them to
    something else, or rebound by a conditional expression keeping them on one arm, with
    the FlashInfer path each is."""
    imported: dict[str, str] = {}
    rebound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _flashinfer(alias.name) and alias.asname:
                    imported[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and _flashinfer(node.module):
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                for statement in handler.body:
                    if isinstance(statement, ast.Assign):
                        for target in statement.targets:
                            if isinstance(target, ast.Name) and target.id in imported:
                                rebound[target.id] = imported[target.id]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
            arm = node.value.body
            for target in node.targets:
                if (
                    isinstance(target, ast.Name)
                    and isinstance(arm, ast.Name)
                    and arm.id == target.id
                    and target.id in imported
                ):
                    rebound[target.id] = imported[target.id]
    return rebound


def _made(tree: ast.Module, name: str) -> tuple[set[str], set[str]]:
    """What holds objects ``name`` builds, as written: the targets of ``x = name(...)``, and
    the containers of ``xs.append(name(...))``."""
    built = {
        id(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name
    }
    objects: set[str] = set()
    containers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and id(node.value) in built:
            objects.update(ast.unparse(target) for target in node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and any(id(argument) in built for argument in node.args)
        ):
            containers.add(ast.unparse(node.func.value))
    return objects, containers


def _chain(node: ast.Attribute) -> tuple[str, list[str]]:
    """The name a chain of attributes starts from, and the attributes."""
    parts = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    return (current.id if isinstance(current, ast.Name) else ""), parts[::-1]


def _use(path: str, node: ast.expr, kind: str, target: str) -> EngineUse:
    return EngineUse(path, node.lineno, kind, target, (), 0, False, frozenset(), "")


def _uses(tree: ast.Module, path: str) -> Iterator[EngineUse]:
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for name, target in _rebound(tree).items():
        objects, containers = _made(tree, name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
                yield _use(path, node, "call", target)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                if ast.unparse(receiver) in objects or (
                    isinstance(receiver, ast.Subscript)
                    and ast.unparse(receiver.value) in containers
                ):
                    yield _use(path, node, "call", f"{target}.{node.func.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and id(node) not in inner
                and _chain(node)[0] == name
            ):
                kind = "call" if id(node) in called else "attribute"
                yield _use(path, node, kind, ".".join((target, *_chain(node)[1])))


def fallback_uses(root: Path, name: str) -> list[EngineUse]:
    """The uses, in file ``name`` under ``root``, of a FlashInfer name its code rebinds to a
    fallback: calls of it and of methods of the objects it builds, chains read off it."""
    tree = ast.parse((root / name).read_text(encoding="utf-8"))
    return sorted(set(_uses(tree, name)), key=lambda use: (use.line, use.target))
